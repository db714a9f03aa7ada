"""What ``compare`` and ``report`` print: the headline and one table, the decision metric first.

The table leads with the metric compared (``score``: the experiment's ``evaluation.metric``,
or an external CSV's scores): its mean per domain and on the average, then the paired Δ on the
average with its Holm-corrected interval ("n/a (N seeds)" where no verdict is possible),
p (Holm) and the verdict. The other accuracy the engine measures (greedy or sampled, when the
rows carry it) follows, labelled, per domain and on the average.
"""

from __future__ import annotations

import math

from dataflex_rl.core.texttable import text_table
from dataflex_rl.harness.reporting.narrative import Fmt, control_status, delta_interval, headline
from dataflex_rl.harness.statistics.analysis import Analysis
from dataflex_rl.harness.statistics.results import Row

#: accuracies the engine records beside ``score`` (``Row.extra``)
METRICS = ("sampled", "greedy")


def score_metric(rows: list[Row]) -> tuple[str, str | None]:
    """(name of the compared metric, the other engine accuracy the rows carry or None).

    The compared metric is the engine accuracy that equals ``score`` on every row ("score"
    for external results); the other one is the remaining accuracy present on every row.
    """
    same = [k for k in METRICS if all(r.extra.get(k) == r.score for r in rows)]
    name = same[0] if same else "score"
    other = [k for k in METRICS if k != name and all(k in r.extra for r in rows)]
    return name, (other[0] if other and name != "score" else None)


def _means(a: Analysis, metric: str | None) -> dict[str, dict[str, float]]:
    """summary -> method -> mean over seeds of ``metric`` (``score`` when None), as stored."""
    if metric is None:
        return {
            s.name: {m.method: m.mean for m in s.methods + s.control_methods} for s in a.summaries
        }
    return a.extra_means[metric]


def summary_table(a: Analysis, rows: list[Row], fmt: Fmt) -> str:
    """The comparison on the average, per method: the compared metric's means per domain and
    on the average, Δ, corrected interval, p (Holm), verdict; then the other accuracy."""
    s = a.primary
    name, other = score_metric(rows)
    parts = a.parts
    cols = [*parts, s.name]
    unit = f", {fmt.unit}" if fmt.unit else ""
    label = "score" if name == "score" else f"{name} accuracy"
    groups = [
        ("", ["method"]),
        (f"{label} (compared{unit})", [*cols, "Δ", "corrected CI", "p (Holm)", "verdict"]),
    ]
    if other:
        groups.append((f"{other} accuracy{unit}", cols))
    main, beside = _means(a, None), _means(a, other) if other else {}
    comps = {c.method: c for c in s.comparisons + s.controls}
    table = []
    for m in s.methods + s.control_methods:
        cells = [m.method, *(fmt.value(main[c].get(m.method, math.nan)) for c in cols)]
        c = comps.get(m.method)
        if c is None:
            cells += ["(baseline)", "", "", ""]
        else:
            verdict = c.verdict
            if c.control:
                verdict += f" [control, must be {c.control}: {control_status(c)}]"
            p = f"{c.p_holm:.3f}" if math.isfinite(c.p_holm) else "n/a"
            cells += [fmt.value(c.delta, True), delta_interval(c, fmt, True), p, verdict]
        if other:
            cells += [fmt.value(beside.get(x, {}).get(m.method, math.nan)) for x in cols]
        table.append(cells)
    return text_table(groups, table)


def summary_text(a: Analysis | None, rows: list[Row], report: str) -> str:
    """Headline, table and where the report is (``report``: its path as text)."""
    if a is None:
        return f"no statistics (the baseline has no finished run); see {report}"
    fmt = Fmt.for_analysis(a)
    return "\n".join(
        [" ".join(headline(a, fmt)), "", summary_table(a, rows, fmt), "", f"report: {report}"]
    )
