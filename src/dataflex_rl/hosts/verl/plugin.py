"""verl plugin entry point: makes the ``dataflex`` trainer mode available, at no cost until used.

verl imports every ``verl.plugins`` entry point in every process, so this module imports
nothing of verl: it checks the verl version and installs a one-shot import hook that
registers the trainer right after `TRAINER_PACKAGE` is imported. verl swallows plugin
exceptions, so failures are logged here, loudly; ``DATAFLEX_VERL_LOG_LEVEL=WARNING``
silences the success line.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

#: verl versions this host was built and tested against: [low, high)
SUPPORTED = ("0.9.1", "0.10")
#: verl's v1 trainer package: importing it is the moment a process chooses a trainer mode
TRAINER_PACKAGE = "verl.trainer.ppo.v1"

logger = logging.getLogger("dataflex_rl.hosts.verl")
try:
    logger.setLevel(os.environ.get("DATAFLEX_VERL_LOG_LEVEL", "INFO").upper())
except ValueError:  # an unknown level name: keep the default rather than fail to load
    logger.setLevel(logging.INFO)


def check_version(installed: str) -> bool:
    """Whether ``installed`` lies in `SUPPORTED`; logs an error when it does not."""
    from packaging.version import Version  # a verl dependency

    low, high = SUPPORTED
    ok = Version(low) <= Version(installed) < Version(high)
    if not ok:
        logger.error(
            "dataflex-rl: verl %s is outside the supported range >=%s,<%s; the "
            "'dataflex' trainer mode is registered but may break. Install "
            "verl>=%s,<%s (pip install 'dataflex-rl[verl]').",
            installed,
            low,
            high,
            low,
            high,
        )
    return ok


def _installed_verl() -> str:
    try:
        return version("verl")
    except PackageNotFoundError:
        return "unknown"


def register() -> None:
    """Import the trainer, which registers the mode (idempotent); log success or the failure.

    Raises whatever the import raised, after logging it with the traceback.
    """
    installed = _installed_verl()
    try:
        from dataflex_rl.hosts.verl import trainer  # noqa: F401  (registers on import)
        from dataflex_rl.hosts.verl.config import TRAINER_MODES
    except Exception:
        logger.exception(
            "dataflex-rl: FAILED to register verl trainer mode 'dataflex' (nor "
            "'dataflex_colocate_async', 'dataflex_separate_async'; verl %s); "
            "trainer.v1.trainer_mode=dataflex will not be found",
            installed,
        )
        raise
    logger.info(
        "dataflex-rl: registered verl trainer modes %s (verl %s, pid %d)",
        ", ".join(repr(m) for m in TRAINER_MODES),
        installed,
        os.getpid(),
    )


def _register_quietly() -> None:
    """`register`, for the import hook: a failure is logged but must not break verl's own
    import of its trainer package (the other trainer modes still work)."""
    try:
        register()
    except Exception:  # noqa: BLE001, S110  (already logged with the traceback)
        pass


class _ThenCall(importlib.abc.Loader):
    """A loader that runs ``then()`` once the wrapped loader has executed the module."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then()

    def __getattr__(self, name: str):  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """A one-shot ``sys.meta_path`` hook: call ``then()`` right after module ``name`` is
    imported (fully executed), wherever and whenever that import happens."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        self.remove()
        spec = importlib.util.find_spec(fullname)  # the other finders (self is gone)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.then)
        return spec

    def install(self) -> None:
        """Add the hook (once); when ``name`` is imported already, call ``then()`` now."""
        if self.name in sys.modules:
            self.then()
        elif not any(isinstance(f, AfterImport) and f.name == self.name for f in sys.meta_path):
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install() -> None:
    """Check the verl version and register the trainer mode once verl's trainers are imported."""
    installed = _installed_verl()
    if installed != "unknown":
        check_version(installed)
    AfterImport(TRAINER_PACKAGE, _register_quietly).install()


install()
