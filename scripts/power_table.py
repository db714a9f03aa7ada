"""Write ``harness/statistics/power_table.csv``: the verdict rule's simulated MDE, in units of
the paired SD (with ``--sides 1``: ``power_table_one_sided.csv``, the one-sided sign-flip test
of the margin verdicts alone), at the report's default settings (α 0.05, power 0.8, `power.REPS` experiments,
`power.N_BOOT` resamples, seed 0, 10,000 random sign flips above 16 seeds), for m = 1..`power.TABLE_MAX_M`
comparisons and every seed count from the fewest that allow a verdict up to 64.

Each entry is what `power.simulated_mde(1.0, n, m=m)` simulates (`power.critical_effects`, run
once here);
``report`` reads the table instead of simulating (`power.table_mde`).
Run: ``python scripts/power_table.py [--sides 1] [OUT.csv]`` (about 25 CPU-minutes; one-sided
about 5).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from dataflex_rl.harness.statistics import power, stats


def main(out: Path | None = None, sides: int = 2) -> None:
    out = out or power.TABLE_FILES[sides]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(f"# {power.TABLE_KEY}\nm,n,mde_sd\n")
        for m in range(1, power.TABLE_MAX_M + 1):
            for n in range(stats.seeds_for_verdict(m, sides=sides), power.TABLE_MAX_N + 1):
                crit = power.critical_effects(n, m, power.TABLE_ALPHA, sides=sides)
                c = float(crit[max(0, math.ceil(power.TABLE_POWER * crit.size) - 1)])
                f.write(f"{m},{n},{c!r}\n")
                f.flush()
                power.critical_effects.cache_clear()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="Write the simulated MDE table the reports read.")
    p.add_argument("out", nargs="?", type=Path, help="output CSV (default: the package's)")
    p.add_argument("--sides", type=int, choices=(1, 2), default=2, help="1: the margin tests")
    args = p.parse_args()
    main(args.out, args.sides)
