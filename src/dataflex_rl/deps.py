"""Optional dependencies: what a command needs, checked before any work starts.

The core install has torch, numpy, pyyaml, tqdm, scipy and pydantic; `EXTRAS` maps every
optional import to its pip package and extra. A command calls `require` for what it cannot do
without and `plots_available` for what it can skip. Imports only the standard library and
`ConfigError`, so any layer may use it.
"""

from __future__ import annotations

import importlib.util
import sys

from dataflex_rl.core.registry import ConfigError

#: import name -> (pip package, the dataflex-rl extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "transformers": ("transformers", "engine"),
    "matplotlib": ("matplotlib", "engine"),
    "reasoning_gym": ("reasoning-gym", "tasks"),
    "math_verify": ("math-verify", "tasks"),
    "pyarrow": ("pyarrow", "tasks"),
    "verl": ("verl", "verl"),
    "ray": ("ray", "ray"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow-skinny", "mlflow"),
    "sqlalchemy": ("sqlalchemy", "mlflow"),
    "alembic": ("alembic", "mlflow"),
    "pandas": ("pandas", "analysis"),
}


class MissingDependencyError(ConfigError, ImportError):
    """An optional package a command needs is not installed (the message names the extra)."""


def available(module: str) -> bool:
    """Whether ``module`` (a top-level import name) can be imported, without importing it.

    A name set to None in ``sys.modules`` (how tests block an import) counts as missing.
    """
    top = module.partition(".")[0]
    if top in sys.modules:
        return sys.modules[top] is not None
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def install_hint(module: str) -> str:
    """``pip install "dataflex-rl[extra]"`` (or the plain package) for ``module``."""
    top = module.partition(".")[0]
    package, extra = EXTRAS.get(top, (top, ""))
    if extra:
        return f'pip install "dataflex-rl[{extra}]" (or pip install {package})'
    return f"pip install {package}"


def require(module: str, purpose: str) -> None:
    """Raise `MissingDependencyError` unless ``module`` (an import name) is importable;
    ``purpose`` says what needs it (``"dataflex-rl train (the engine's policy)"``)."""
    if not available(module):
        raise MissingDependencyError(
            f"{purpose} needs {module!r}, which is not installed: {install_hint(module)}"
        )


def plots_available(purpose: str, *, say=print) -> bool:
    """Whether matplotlib is installed; if not, ``say`` one line that ``purpose`` is skipped."""
    if available("matplotlib"):
        return True
    say(f"note: {purpose} skipped: matplotlib is not installed ({install_hint('matplotlib')})")
    return False
