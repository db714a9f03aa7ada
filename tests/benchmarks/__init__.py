"""Tests of what only benchmarks use (benchmarks/*.py, loaded by path: benchmarks/ is scripts,
not a package)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    """The module ``benchmarks/<name>.py``, imported once per test session (registered under
    ``benchmarks_<name>`` so its dataclasses and pickles resolve)."""
    key = f"benchmarks_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
