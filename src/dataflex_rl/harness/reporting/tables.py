"""The report's tables as data (`document.Table`, formatted cells), for every renderer.

Each builder reads numbers an analysis already holds and formats them; a number that says
"none" or "not available" is written in words ("none", "n/a"), never ``inf`` or ``nan``.
"""

from __future__ import annotations

import math

import numpy as np

from dataflex_rl.harness.reporting.document import BASELINE, Table
from dataflex_rl.harness.reporting.narrative import Fmt, control_status, delta_interval, pvalue
from dataflex_rl.harness.statistics import aggregates
from dataflex_rl.harness.statistics.analysis import Analysis, SummaryResult


def summary_table(s: SummaryResult, fmt: Fmt) -> Table:
    """Per method of ``s`` (controls last): mean, paired Δ, intervals, p, MDE, r, verdict."""
    unit = f" ({fmt.unit})" if fmt.unit else ""
    header = (
        "method",
        "n",
        f"mean{unit} [95% CI]",
        f"Δ{unit} [95% CI]",
        "corrected CI (level)",
        "p",
        "p (Holm)",
        "MDE",
        "r",
        "verdict",
    )
    comps = {c.method: c for c in s.comparisons + s.controls}
    rows, verdicts = [], []
    for m in s.methods + s.control_methods:
        head = (m.method, str(m.n), f"{fmt.value(m.mean)} {fmt.interval(m.low, m.high)}")
        c = comps.get(m.method)
        if c is None:
            rows.append((*head, "(baseline)", "", "", "", "", "", ""))
            verdicts.append(BASELINE)
            continue
        level = f" ({100 * (1 - c.level):.1f}%)" if math.isfinite(c.level) else ""
        level = level if c.verdict_possible else ""
        rows.append(
            (
                *head,
                f"{fmt.value(c.delta, True)} {delta_interval(c, fmt)}",
                f"{delta_interval(c, fmt, corrected=True)}{level}",
                pvalue(c.p),
                pvalue(c.p_holm),
                "none" if math.isinf(c.mde) else fmt.value(c.mde),
                f"{c.corr:+.2f}" if math.isfinite(c.corr) else "n/a",
                f"{c.verdict}; control ({c.control}): {control_status(c)}"
                if c.control
                else c.verdict,
            )
        )
        verdicts.append(c.verdict)
    numeric = (False, True, False, False, False, True, True, True, True, False)
    return Table(header, tuple(rows), numeric, tuple(verdicts))


def aggregate_table(aggs: list[aggregates.MethodAggregate], baseline: str, fmt: Fmt) -> Table:
    """IQM and probability of improvement per method (`Analysis.aggregates`)."""
    unit = f" ({fmt.unit})" if fmt.unit else ""
    rows = tuple(
        (
            g.method,
            f"{g.runs} × {g.tasks}",
            f"{fmt.value(g.iqm)} {fmt.interval(*g.iqm_ci)}",
            "—"
            if g.method == baseline
            else f"{_num(g.poi)} [{_num(g.poi_ci[0])}, {_num(g.poi_ci[1])}]",
        )
        for g in aggs
    )
    header = ("method", "runs × benchmarks", f"IQM{unit} [95% CI]", f"P(> {baseline}) [95% CI]")
    return Table(header, rows, (False, True, False, False))


def _num(v: float) -> str:
    return f"{v:.2f}" if math.isfinite(v) else "n/a"


def ranking_table(a: Analysis) -> Table:
    """Each method's rank by mean under every summary (`Analysis.ranks`)."""
    names = [s.name for s in a.summaries]
    table = dict(zip(names, a.ranks))
    rows = tuple(
        (m, *(f"{table[n][i]:.0f}" if math.isfinite(table[n][i]) else "n/a" for n in names))
        for i, m in enumerate(a.methods)
    )
    return Table(("method", *names), rows, (False, *(True,) * len(names)))


def tau_table(a: Analysis) -> Table:
    """Kendall's tau-b between every two summaries' rankings."""
    names = [s.name for s in a.summaries]
    rows = tuple((n, *(_num(t) for t in np.asarray(a.tau)[i])) for i, n in enumerate(names))
    return Table(("", *names), rows, (False, *(True,) * len(names)))


def scores_table(a: Analysis, fmt: Fmt) -> Table:
    """The comparison on the average, decision metric first (what ``compare`` and ``report``
    print): per method the compared metric's means per domain and on the average, Δ, the
    corrected interval ("n/a (N seeds)" where no verdict is possible), p (Holm) and the
    verdict; then the other accuracy the engine measured (`Analysis.beside`), labelled."""
    s = a.primary
    cols = [*a.parts, s.name]
    unit = f", {fmt.unit}" if fmt.unit else ""
    label = "score" if a.compared == "score" else f"{a.compared} accuracy"
    main = {x.name: {m.method: m.mean for m in x.methods + x.control_methods} for x in a.summaries}
    beside = a.extra_means[a.beside] if a.beside else {}
    comps = {c.method: c for c in s.comparisons + s.controls}
    rows = []
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
        cells += [fmt.value(beside.get(x, {}).get(m.method, math.nan)) for x in cols if beside]
        rows.append(tuple(cells))
    header = ("method", *cols, "Δ", "corrected CI", "p (Holm)", "verdict")
    groups = [("", 1), (f"{label} (compared{unit})", len(cols) + 4)]
    if beside:
        header += tuple(cols)
        groups.append((f"{a.beside} accuracy{unit}", len(cols)))
    numeric = tuple(h not in ("method", "corrected CI", "verdict") for h in header)
    return Table(header, tuple(rows), numeric, groups=tuple(groups))
