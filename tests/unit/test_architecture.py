"""The package's layers (docs/architecture.md) hold, and importing it changes no global state.

The layers are written down once, as import-linter contracts in pyproject.toml
(``[tool.importlinter]``); this test runs them, so a new import circle or an import that runs
back up a layer fails here instead of waiting for a review.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import dataflex_rl

SRC = Path(dataflex_rl.__file__).resolve().parents[1]
ROOT = SRC.parent
PYPROJECT = ROOT / "pyproject.toml"
#: modules that import verl at import time (checked by the verl host tests)
NEEDS_VERL = {"dataflex_rl.hosts.verl.plugin", "dataflex_rl.hosts.verl.trainer"}
#: modules that import TRL at import time (checked by the TRL host tests, tests/hosts_trl)
NEEDS_TRL = {
    "dataflex_rl.hosts.trl.trainer",
    "dataflex_rl.hosts.trl.run",
    "dataflex_rl.hosts.trl.check",
    "dataflex_rl.hosts.trl.tensors",
    "dataflex_rl.hosts.trl.async_trainer",
}


def _env() -> dict[str, str]:
    """This checkout's source first on the path, whatever is installed."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


def _require(*modules: str, why: str):
    """The first of ``modules`` that imports; a test failure saying ``why`` when none does (a
    check CI must run is never skipped for a missing tool)."""
    for name in modules:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    pytest.fail(f"{' or '.join(modules)} is not installed: {why}", pytrace=False)


def _contracts() -> list[dict]:
    # tomllib is Python 3.11+; on 3.10 import-linter (the dev extra) brings tomli
    toml = _require(
        "tomllib", "tomli", why="reading pyproject.toml; install the dev extra (.[dev])"
    )
    return toml.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]


def test_a_missing_checker_fails_the_test_instead_of_skipping_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "importlinter", None)  # import fails as if not installed
    with pytest.raises(pytest.fail.Exception, match="importlinter is not installed: the dev"):
        _require("importlinter", why="the dev extra has it")
    assert _require("json", why="") is json


def test_import_contracts_are_kept():
    _require("importlinter", why="it checks the layers contract; install the dev extra (.[dev])")
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(PYPROJECT)!r}, no_cache=True, "
        "no_logo=True))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and " KEPT" in out.stdout


def test_every_package_has_a_layer():
    """A new top-level module or host must be placed in the layers contract."""
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    placed = {m.strip(" ()") for layer in layers for m in layer.split("|")}
    modules = {f"dataflex_rl.{m.name}" for m in pkgutil.iter_modules(dataflex_rl.__path__)}
    hosts = {
        f"dataflex_rl.hosts.{m.name}"
        for m in pkgutil.iter_modules([str(SRC / "dataflex_rl" / "hosts")])
    }
    expected = (modules - {"dataflex_rl.hosts"}) | hosts
    assert expected - placed == set(), f"not in any layer: {sorted(expected - placed)}"
    assert placed - expected == set(), f"layers name missing modules: {sorted(placed - expected)}"


_SNAPSHOT = r"""
import json, logging, os, random, sys, warnings
import numpy as np, torch
import scipy.stats   # third-party: adds its own warning filters when first imported
try:
    import matplotlib
except ImportError:
    matplotlib = None


def rc(key):   # the raw value: reading rcParams["backend"] would itself resolve the backend
    return str(matplotlib.rcParams._get(key))

def snapshot():
    rcs = {} if matplotlib is None else {f"rcParams[{k!r}]": rc(k) for k in matplotlib.rcParams}
    return {**rcs,
        "torch_threads": torch.get_num_threads(),
        "torch_dtype": str(torch.get_default_dtype()),
        "torch_rng": torch.get_rng_state().sum().item(),
        "python_rng": hash(random.getstate()),
        "numpy_rng": int(np.random.get_state()[1].sum()),
        "warning_filters": [str(f) for f in warnings.filters],
        "logging_root": [logging.getLogger().level, len(logging.getLogger().handlers)],
        "environ": sorted(os.environ.items()),
        "pyplot": "matplotlib.pyplot" in sys.modules,
    }

before = snapshot()
import importlib
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
after = snapshot()
print(json.dumps({k: [before[k], after[k]] for k in before if before[k] != after[k]}))
"""


def test_importing_the_package_changes_no_global_state():
    """No module sets threads, seeds, warning filters, logging, env vars or a matplotlib backend
    (nor loads pyplot) when imported."""
    names = sorted(
        m.name
        for m in pkgutil.walk_packages(dataflex_rl.__path__, "dataflex_rl.")
        if m.name not in NEEDS_VERL | NEEDS_TRL and not m.name.endswith("__main__")
    )
    out = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT, json.dumps(names)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed == {}, f"importing dataflex_rl changed: {changed}"


def test_unit_tests_mirror_the_packages():
    """tests/unit/<package>/ for every package of src (the verl host's runtime is tested in
    tests/hosts, with verl installed), and no unit-test folder without its package."""
    unit = ROOT / "tests" / "unit"
    src_pkgs = {
        p.parent.relative_to(SRC / "dataflex_rl").as_posix()
        for p in (SRC / "dataflex_rl").rglob("__init__.py")
    } - {"."}
    test_dirs = {p.parent.relative_to(unit).as_posix() for p in unit.rglob("test_*.py")} - {"."}
    assert src_pkgs - test_dirs == set(), (
        f"packages without tests/unit/<package>/: {sorted(src_pkgs - test_dirs)}"
    )
    assert test_dirs - src_pkgs == set(), (
        f"tests/unit folders without a package: {sorted(test_dirs - src_pkgs)}"
    )
