"""A synthetic comparison that fills every section of a report (report.md and report.html).

Two domains of two benchmarks each, 8 seeds, learning curves over 4 checkpoints, three real
methods (one +6 points everywhere, one −6 points, one equal to the baseline plus noise), an A/A
control, a mixer's proportions and a failed run. One method's name carries HTML
(``<b>"x"&y</b>``) and so does the title, to show that user strings are escaped.
"""

from __future__ import annotations

import numpy as np

from dataflex_rl.harness.reporting.report import Failure, ReportInputs
from dataflex_rl.harness.statistics.results import Row

#: the sections a report of the synthetic comparison fills, in page order (one list for the
#: HTML, markdown and terminal renderings)
SECTIONS = [
    "sensitivity",
    "verdicts",
    "forest",
    "scores",
    "curves",
    "per-summary",
    "ranking",
    "aggregates",
    "proportions",
    "failures",
    "setup",
    "provenance",
    "definitions",
]

HOSTILE = '<b>"x"&y</b>'
TITLE = "Comparison: <script>alert(1)</script> & co"
BENCHMARKS = {"gsm": "math", "aime": "math", "zebra": "logic", "knights": "logic"}
#: method -> true final gain over the baseline (score units)
GAINS = {"baseline": 0.0, "up": 0.06, "down": -0.06, HOSTILE: 0.0, "aa_copy": 0.0}
STEPS = (0, 10, 20, 30)


def rows(seeds: int = 8) -> list[Row]:
    """Final scores: baseline 0.3–0.6 by benchmark, plus a per-seed shift shared by every
    method (what pairing removes) and small independent noise."""
    rng = np.random.default_rng(0)
    out = []
    for s in range(seeds):
        shift = rng.normal(0, 0.03)
        for k, (bench, domain) in enumerate(BENCHMARKS.items()):
            start = 0.2 + 0.05 * k
            for method, gain in GAINS.items():
                final = 0.3 + 0.05 * k + shift + gain + rng.normal(0, 0.005)
                for step in STEPS:
                    frac = step / STEPS[-1]
                    score = start + frac * (final - start)
                    out.append(
                        Row(method, str(s), bench, float(np.clip(score, 0, 1)), domain, step)
                    )
    return out


def proportions() -> list[dict]:
    return [
        {"method": "up", "seed": "0", "step": st, "domain": d, "target": t, "actual": t}
        for st in STEPS
        for d, t in (("math", 0.6), ("logic", 0.4))
    ]


def inputs(**kwargs) -> ReportInputs:
    return ReportInputs(
        TITLE,
        "baseline",
        setup=["results: `synthetic <rows>` (tests/report_rows.py)"],
        failures=[
            Failure("up", "9", "ValueError: <boom> & bust", "Traceback\n  x < y\nValueError")
        ],
        proportions=proportions(),
        controls={"aa_copy": "same"},
        **kwargs,
    )
