"""The report's tables as data (formatted cells), for report.md and report.html alike.

Each builder reads numbers an analysis already holds and formats them; `markdown` renders a
`Table` as markdown lines, `dataflex_rl.harness.reporting.html_report` as an HTML table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dataflex_rl.harness.reporting.narrative import Fmt, control_status, delta_interval, pvalue
from dataflex_rl.harness.statistics import aggregates
from dataflex_rl.harness.statistics.analysis import Analysis, SummaryResult

#: the verdict key of a baseline row (`Table.verdicts`)
BASELINE = "baseline"


@dataclass(frozen=True)
class Table:
    """Formatted cells.

    Args:
        header: column names.
        rows: one tuple of cells per row, as long as ``header``.
        numeric: per column, whether it holds numbers (right-aligned).
        verdicts: per row, the verdict it shows (an `analysis` verdict, or `BASELINE`), for
            renderers that colour it; empty when the table has no verdicts.
        link: the column whose cells are relative paths, rendered as links to them (-1: none).
    """

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]
    verdicts: tuple[str, ...] = ()
    link: int = -1


@dataclass(frozen=True)
class TableSection:
    """A section a caller adds to a report (`report.ReportInputs.sections`), e.g. the rounds of
    ``compare --until-decided``: sentences, a table, sentences; report.md and report.html
    render the same one.

    Args:
        sid: its id in report.html (letters, digits, ``-``).
        title: its heading.
        lead: markdown sentences before the table (one paragraph).
        table: the table.
        notes: markdown sentences after it (one paragraph).
    """

    sid: str
    title: str
    lead: tuple[str, ...]
    table: Table
    notes: tuple[str, ...] = ()


def section_markdown(sec: TableSection) -> list[str]:
    """``sec`` as markdown lines (a level-2 heading)."""
    return [
        f"## {sec.title}",
        "",
        *([" ".join(sec.lead), ""] if sec.lead else []),
        *markdown(sec.table),
        *(["", *sec.notes] if sec.notes else []),
    ]


def markdown(t: Table) -> list[str]:
    """The table as markdown lines (cells of the `Table.link` column as ``[path](path)``)."""
    align = "|" + "|".join("---:" if n else "---" for n in t.numeric) + "|"

    def cells(row: tuple[str, ...]) -> list[str]:
        return [f"[{c}]({c})" if j == t.link and c else c for j, c in enumerate(row)]

    return [
        "| " + " | ".join(t.header) + " |",
        align,
        *("| " + " | ".join(cells(row)) + " |" for row in t.rows),
    ]


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
                "inf" if math.isinf(c.mde) else fmt.value(c.mde),
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
            "—" if g.method == baseline else f"{g.poi:.2f} [{g.poi_ci[0]:.2f}, {g.poi_ci[1]:.2f}]",
        )
        for g in aggs
    )
    header = ("method", "runs × benchmarks", f"IQM{unit} [95% CI]", f"P(> {baseline}) [95% CI]")
    return Table(header, rows, (False, True, False, False))


def ranking_table(a: Analysis) -> Table:
    """Each method's rank by mean under every summary (`Analysis.ranks`)."""
    names = [s.name for s in a.summaries]
    table = dict(zip(names, a.ranks))
    rows = tuple((m, *(str(int(table[n][i])) for n in names)) for i, m in enumerate(a.methods))
    return Table(("method", *names), rows, (False, *(True,) * len(names)))


def tau_table(a: Analysis) -> Table:
    """Kendall's tau-b between every two summaries' rankings."""
    names = [s.name for s in a.summaries]
    rows = tuple(
        (n, *(f"{t:.2f}" if math.isfinite(t) else "n/a" for t in np.asarray(a.tau)[i]))
        for i, n in enumerate(names)
    )
    return Table(("", *names), rows, (False, *(True,) * len(names)))
