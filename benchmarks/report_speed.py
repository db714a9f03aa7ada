"""How long ``report`` takes on a paper-sized release table, against the code of another commit.

Writes the generated release table of issue 32 (`tests.release_table.paper_records`: 171 runs,
3 models, 3 campaigns, 12 benchmark columns in percent, 3 seeds per cell, 13 strata, regime cells
empty for most runs, a mixing campaign whose reference is ``static``, a stratum with one method)
and times, as a user would run it (a fresh process, median wall time of ``--repeats``)::

    dataflex-rl report --from-csv paper.csv --by model,campaign,regime --scale 0.01 \\
        --baseline baseline,static [--no-plots]

then the same with the code of ``--old`` (exported with ``git archive``; default the commit
before issue 32), which cannot read that table: it gets the table reshaped by hand as its
users had to (empty regime cells written ``none``, ``static`` renamed ``baseline``), the same
comparisons. Prints the wall and CPU seconds of each, their ratio, the machine's CPUs and load
average (the figures are only comparable on a machine otherwise idle), and whether both wrote
the same verdicts.

Usage::

    .venv/bin/python benchmarks/report_speed.py                  # 3 repeats each, old and new
    .venv/bin/python benchmarks/report_speed.py --repeats 1 --old ''   # the new code alone
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the last commit before issue 32 (report per stratum refused empty cells and other references)
OLD = "ea02589"
ARGS = ["--by", "model,campaign,regime", "--scale", "0.01"]


def run(src: Path, table: Path, out: Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one ``report`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "dataflex_rl.cli", "report", "--from-csv", str(table), *ARGS]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [*cmd, "--out", str(out), *extra], env=env, check=True, stdout=subprocess.DEVNULL
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def verdicts(out: Path) -> dict[tuple, str]:
    """(stratum values, summary, method) -> verdict, with ``static`` read as ``baseline`` and
    an empty regime as ``none`` (the by-hand reshape's names)."""
    rows = csv.DictReader((out / "statistics.csv").open())
    return {
        (r["model"], r["campaign"], r["regime"] or "none", r["summary"], r["method"]): r["verdict"]
        for r in rows
        for r in [{**r, "method": "baseline" if r["method"] == "static" else r["method"]}]
    }


def by_hand(records: list[dict], header: list[str], path: Path) -> Path:
    """The reshape a user of the old code made: empty regime ``none``, ``static`` as
    ``baseline``."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for r in records:
            static = r["method"] == "static"
            w.writerow(
                {**r, "regime": r["regime"] or "none"} | ({"method": "baseline"} if static else {})
            )
    return path


def timed(label: str, src: Path, table: Path, tmp: Path, extra: list[str], repeats: int):
    walls, cpus = [], []
    for k in range(repeats):
        wall, cpu = run(src, table, tmp / f"{label}-{k}", extra)
        walls.append(wall)
        cpus.append(cpu)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"{label:<22} wall {wall:6.1f} s (median of {repeats})   CPU {cpu:6.1f} s")
    return wall, cpu, tmp / f"{label}-0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--old", default=OLD, help="git commit to compare with ('' for none)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.release_table import PAPER_HEADER, paper_records, write_paper_csv

    print(f"{os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        records = paper_records()
        table = write_paper_csv(tmp / "paper.csv", records)
        new = ROOT / "src"
        results = {}
        for plots in (False, True):
            extra = ["--baseline", "baseline,static"] + ([] if plots else ["--no-plots"])
            label = "new" + ("" if plots else " --no-plots")
            results[label] = timed(label, new, table, tmp, extra, args.repeats)
        if args.old:
            old = tmp / "old"
            old.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.old, "src"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            hand = by_hand(records, PAPER_HEADER, tmp / "paper_by_hand.csv")
            for plots in (False, True):
                extra = [] if plots else ["--no-plots"]
                label = f"old {args.old}" + ("" if plots else " --no-plots")
                results[label] = timed(label, old / "src", hand, tmp, extra, args.repeats)
            for suffix in ("", " --no-plots"):
                (nw, nc, _), (ow, oc, _) = (
                    results["new" + suffix],
                    results[f"old {args.old}{suffix}"],
                )
                print(f"old / new{suffix}: wall {ow / nw:.1f}x, CPU {oc / nc:.1f}x")
            # (the old code also "compared" the single-method stratum: its baseline alone)
            new_v, old_v = verdicts(results["new"][2]), verdicts(results[f"old {args.old}"][2])
            same = all(old_v.get(k) == v for k, v in new_v.items())
            print(f"same verdicts in the {len(new_v)} rows of every compared stratum: {same}")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
