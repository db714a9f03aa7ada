"""Write ``harness/statistics/power_table.csv``: the verdict rule's simulated MDE, in units of
the paired SD, at the report's default settings (α 0.05, power 0.8, `power.REPS` experiments,
`power.N_BOOT` resamples, seed 0, 10,000 random sign flips above 16 seeds), for m = 1..`power.TABLE_MAX_M`
comparisons and every seed count from the fewest that allow a verdict up to 64.

Each entry is what `power.simulated_mde(1.0, n, m=m)` simulates (`power.critical_effects`, run
once here);
``report`` reads the table instead of simulating (`power.table_mde`).
Run: ``python scripts/power_table.py [OUT.csv]`` (about 25 CPU-minutes).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from dataflex_rl.harness.statistics import power

OUT = Path(__file__).parents[1] / "src/dataflex_rl/harness/statistics/power_table.csv"


def main(out: Path = OUT) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(f"# {power.TABLE_KEY}\nm,n,mde_sd\n")
        for m in range(1, power.TABLE_MAX_M + 1):
            for n in range(power.min_seeds(m), power.TABLE_MAX_N + 1):
                crit = power.critical_effects(n, m, power.TABLE_ALPHA)
                c = float(crit[max(0, math.ceil(power.TABLE_POWER * crit.size) - 1)])
                f.write(f"{m},{n},{c!r}\n")
                f.flush()
                power.critical_effects.cache_clear()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
