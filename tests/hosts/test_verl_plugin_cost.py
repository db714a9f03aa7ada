"""Installed but not enabled, the plugin costs nothing: ``import verl`` with the ``dataflex``
entry point active against the same import with plugins off (``VERL_USE_EXTERNAL_PLUGINS``),
each in a fresh interpreter. The module sets are the check: the plugin may add only
dataflex_rl's own core modules (the regression this guards, the trainer imported eagerly,
added 1,900). The import time is a benchmark's (benchmarks/verl_plugin_import.py): a timed
assert failed on a loaded machine (4.3 s against 3.3-3.6 s with the same module sets).
"""

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

pytest.importorskip("verl")

PROBE = """
import json, os, sys, time
before = dict(os.environ)
t0 = time.perf_counter()
import verl
seconds = time.perf_counter() - t0
changed = {k: os.environ.get(k) for k in set(before) | set(os.environ)
           if before.get(k) != os.environ.get(k)}
with open(sys.argv[1], "w") as f:
    json.dump({"seconds": seconds, "modules": sorted(sys.modules), "env": changed,
               "hooks": [type(h).__name__ for h in sys.meta_path]}, f)
"""
#: top-level packages that the plugin must not import (verl's own and what the trainer pulls)
HEAVY = {
    "verl",
    "ray",
    "transformers",
    "vllm",
    "sglang",
    "tensordict",
    "transfer_queue",
    "megatron",
    "hydra",
    "omegaconf",
    "torchdata",
    "datasets",
    "accelerate",
}


def import_verl(folder, plugins: str, i: int) -> dict:
    """``import verl`` in a fresh interpreter with ``VERL_USE_EXTERNAL_PLUGINS=plugins``: its
    seconds, modules, changed environment, import hooks and output."""
    out = folder / f"{plugins}-{i}.json"
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": plugins}
    env.pop("DATAFLEX_VERL_LOG_LEVEL", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    result["output"] = proc.stdout + proc.stderr
    return result


def test_import_verl_with_the_plugin_costs_nothing(tmp_path):
    if "dataflex" not in {ep.name for ep in entry_points(group="verl.plugins")}:
        pytest.skip("the dataflex entry point is not installed (pip install -e .)")
    off, on = import_verl(tmp_path, "none", 0), import_verl(tmp_path, "dataflex", 0)
    assert "AfterImport" in on["hooks"] and "AfterImport" not in off["hooks"]  # it did load
    added = sorted(set(on["modules"]) - set(off["modules"]))
    # only dataflex_rl's own package and light dependencies (pydantic for its configs); none
    # of verl's, and not the trainer (1,900 modules when it was imported eagerly)
    heavy = [m for m in added if m.split(".")[0] in HEAVY]
    assert not heavy, heavy
    assert "dataflex_rl.hosts.verl.trainer" not in added
    assert len(added) < 150, added
    assert on["output"] == off["output"]  # no new line on stdout or stderr
    assert on["env"] == off["env"]  # e.g. TORCH_CUDA_ARCH_LIST untouched
