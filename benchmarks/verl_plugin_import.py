"""What the installed-but-not-enabled verl plugin costs at ``import verl``: the same import with
the ``dataflex`` entry point active against plugins off (``VERL_USE_EXTERNAL_PLUGINS``), each in
a fresh interpreter, the two sides interleaved ``--runs`` times; per side the fastest run (the
least disturbed by other processes) and the median, and the ratio on/off.

    .venv-verl/bin/python benchmarks/verl_plugin_import.py [--runs 5]

The exact check (the modules the plugin adds) is tests/hosts/test_verl_plugin_cost.py; this
is the time, which on a shared machine drifts by up to ~20% between fresh interpreters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import verl
seconds = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"seconds": seconds, "modules": len(sys.modules)}, f)
"""


def import_once(folder: Path, plugins: str, i: int) -> dict:
    out = folder / f"{plugins}-{i}.json"
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": plugins}
    subprocess.run([sys.executable, "-c", PROBE, str(out)], env=env, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="imports per side (default 5)")
    args = p.parse_args(argv)
    runs: dict[str, list[dict]] = {"none": [], "dataflex": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for plugins, results in runs.items():
                results.append(import_once(Path(tmp), plugins, i))
    print("| plugins | fastest s | median s | modules |")
    print("|---|---:|---:|---:|")
    for plugins, results in runs.items():
        s = [r["seconds"] for r in results]
        print(
            f"| {plugins} | {min(s):.2f} | {statistics.median(s):.2f} | {results[0]['modules']} |"
        )
    off = min(r["seconds"] for r in runs["none"])
    on = min(r["seconds"] for r in runs["dataflex"])
    print(f"ratio on/off (fastest): {on / off:.3f}")


if __name__ == "__main__":
    main()
