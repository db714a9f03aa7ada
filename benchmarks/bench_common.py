"""What the benchmarks that run a harness ``compare`` share (next_strategies.py,
async_staleness.py): the harness's verdict of one comparison as table cells, the numbers'
text, the summary line of a compare, the CSV writer and the script's exit on a config error.

Not a benchmark: a module the scripts import from their own folder (benchmarks/ is scripts,
not a package).
"""

from __future__ import annotations

import csv
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shown(path: Path) -> Path:
    """``path`` relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def mean(xs) -> float:
    """The mean of the finite numbers in ``xs`` (nan where there are none)."""
    xs = [x for x in xs if isinstance(x, int | float) and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else math.nan


def ratio(a: float, b: float) -> float:
    """``a / b``; nan where ``b`` is 0 or not finite."""
    return a / b if b and math.isfinite(b) else math.nan


def load_average() -> float:
    """The machine's 1-minute load average (nan where the OS gives none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def num(v, digits: int = 1, signed: bool = False) -> str:
    """``v`` with ``digits`` decimals (``signed``: with its sign); "n/a" for a missing or
    non-finite value."""
    if v is None or v == "" or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def comparison_cells(c, scale: float) -> dict:
    """One comparison (`analysis.Comparison`) as the harness's report words it: effect and
    corrected interval times ``scale`` (100: points for accuracies), raw and Holm p and the
    latter's text, the
    verdict (where the seeds allow none: "not enough paired seeds (n; needs m)", the report's
    "n/a (n seeds)")."""
    from dataflex_rl.harness.reporting.narrative import pvalue
    from dataflex_rl.harness.statistics.analysis import TOO_FEW

    if c.verdict_possible:
        verdict = c.verdict
    else:
        need = c.seeds_for_verdict
        verdict = f"{TOO_FEW} ({c.n_pairs}; needs {need if need is not None else '> 64'})"
    return {
        "delta": c.delta * scale,
        "ci_low": c.corrected_ci[0] * scale,
        "ci_high": c.corrected_ci[1] * scale,
        "ci_level": 1 - c.level if math.isfinite(c.level) else math.nan,
        "p": c.p,
        "p_holm": c.p_holm,
        "p_text": pvalue(c.p_holm),
        "verdict": verdict,
        "verdict_possible": c.verdict_possible,
    }


def effect_text(r: dict, prefix: str = "") -> str:
    """The `comparison_cells` under ``prefix`` in ``r`` as ``+0.4 [-1.2, +2.0]`` (the effect
    and its corrected interval), ``+0.4 n/a`` where the seeds allow no verdict (no interval is
    computed there), "" where ``r`` holds no comparison."""
    if prefix + "delta" not in r:
        return ""
    if r.get(prefix + "verdict_possible"):
        lo, hi = r[prefix + "ci_low"], r[prefix + "ci_high"]
        ci = f"[{num(lo, signed=True)}, {num(hi, signed=True)}]"
    else:
        ci = "n/a"
    return f"{num(r[prefix + 'delta'], signed=True)} {ci}"


def compare_line(what: str, res, wall: float) -> str:
    """The summary line of one `run_compare` result ``res`` that took ``wall`` seconds: runs
    done, reused and failed, the runs' CPU time, the harness report and its pairing check."""
    from dataflex_rl.harness.running.compare import pairing_check

    ex = res.execution
    cpu = [r["summary"]["cpu_seconds"] for r in ex.done if "cpu_seconds" in r["summary"]]
    cpu_text = (
        f", {sum(cpu) / 60:.1f} CPU-min in the runs (`cpu_seconds`; a reused run counts its own)"
        if cpu
        else ""
    )
    return (
        f"- {what}: {len(ex.done)} runs done ({ex.skipped} reused), {len(ex.failed)} failed; "
        f"{wall / 60:.1f} min wall for this invocation{cpu_text}; harness report "
        f"`{shown(res.out_dir)}/report.md`; {pairing_check(ex)}"
    )


def write_csv(rows: list[dict], columns, path: Path) -> None:
    """``rows`` under ``columns`` (empty cells where a row has no value), for pandas."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in columns})


def config_errors(run: Callable[[], int]) -> int:
    """``run()``'s exit status; a `ConfigError` (a bad arm, preset or setting, raised before
    any run starts) is printed as ``error: ...`` and exits 2."""
    from dataflex_rl.core.registry import ConfigError

    try:
        return run()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
