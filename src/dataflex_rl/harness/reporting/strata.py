"""One comparison per stratum (``report --by model,campaign,regime``): a folder each, plus an
index.

Under ``out``: ``<stratum>/`` holds that comparison's full report (report.md, report.html,
statistics.csv, plots/), exactly what ``report`` writes for the stratum's rows alone;
``report.md`` opens with an index (one line per stratum: its values, paired seeds, verdict
counts, whether a verdict is possible at all) followed by one section per stratum;
``report.html`` is the same index as one self-contained page, linking each stratum's
report.html, with each stratum's headline and verdict table (colour and words);
``statistics.csv`` is every stratum's statistics, the ``by`` columns first.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from dataflex_rl.core.io import atomic_write_text
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting import provenance
from dataflex_rl.harness.reporting.html_report import StratumPage, render_index
from dataflex_rl.harness.reporting.narrative import paired_seeds
from dataflex_rl.harness.reporting.report import (
    STATISTICS_COLUMNS,
    ReportInputs,
    ReportParts,
    definitions,
    prepare_report,
    render_markdown,
    statistics_rows,
    write_csv,
    write_report_files,
)
from dataflex_rl.harness.reporting.tables import Table, markdown
from dataflex_rl.harness.statistics.analysis import BETTER, NO_DIFF, WORSE
from dataflex_rl.harness.statistics.results_table import ResultsTable, Stratum, slug


def pick_baseline(table: ResultsTable, requested: str | None) -> str:
    """``requested``, else "baseline", else the file's first method; it must be a method of
    every stratum.

    Raises:
        ConfigError: a stratum without the baseline (names it and its methods).
    """
    first = list(dict.fromkeys(r.method for r in table.rows))
    everywhere = [m for m in first if all(any(r.method == m for r in s.rows) for s in table.strata)]
    baseline = requested or ("baseline" if "baseline" in everywhere else first[0])
    for s in table.strata:
        methods = list(dict.fromkeys(r.method for r in s.rows))
        if baseline not in methods:
            where = f" in {s.label}" if s.key else ""
            raise ConfigError(
                f"--baseline {baseline!r}: not a method of {table.path}{where}; methods"
                f"{where}: {', '.join(methods)}"
                + (f"; methods of every stratum: {', '.join(everywhere)}" if s.key else "")
            )
    return baseline


def folders(strata: list[Stratum]) -> list[str]:
    """A distinct folder name per stratum (`results_table.slug`, numbered on a collision)."""
    out: list[str] = []
    for s in strata:
        name, k = slug(s), 2
        while name in out:
            name, k = f"{slug(s)}-{k}", k + 1
        out.append(name)
    return out


def write_strata_report(
    table: ResultsTable, out_dir: str | Path, inputs: ReportInputs
) -> list[ReportParts]:
    """Write one report per stratum of ``table`` and the index (see the module docstring).

    Args:
        table: the strata (`results_table.read_table`).
        out_dir: the output folder.
        inputs: shared by every stratum (its title and setup gain the stratum's values).

    Returns:
        The `ReportParts` of each stratum, in order.
    """
    check_strata_inputs(table)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for s, folder in zip(table.strata, folders(table.strata)):
        own = replace(
            inputs,
            title=f"{inputs.title} — {s.label}",
            setup=[*inputs.setup, f"stratum: {s.label} ({len(s.rows)} scores)"],
            params={**inputs.params, **{f"stratum.{c}": v for c, v in s.key}},
        )
        p = prepare_report(s.rows, out / folder, own)
        write_report_files(p)
        parts.append(p)
    stats = [
        {**s.values, **row}
        for s, p in zip(table.strata, parts)
        for row in statistics_rows(p.analysis)
    ]
    write_csv(stats, [*table.by, *STATISTICS_COLUMNS], out / "statistics.csv")
    atomic_write_text(out / "report.md", index_markdown(table, parts, inputs, out))
    atomic_write_text(out / "report.html", index_html(table, parts, inputs, out))
    return parts


#: the index's columns after the stratum's own
INDEX_COLUMNS = (
    "methods",
    "paired seeds",
    "verdict possible",
    "better",
    "worse",
    "no detectable difference",
    "report",
)


def index_row(s: Stratum, p: ReportParts, out: Path, page: str = "report.md") -> tuple[str, ...]:
    """The index's cells of one stratum: its values, then `INDEX_COLUMNS` (``report``: the
    path of its ``page`` relative to ``out``)."""
    prim = p.analysis.primary
    counts = [sum(c.verdict == v for c in prim.comparisons) for v in (BETTER, WORSE, NO_DIFF)]
    possible = [c.verdict_possible for c in prim.comparisons]
    if not possible:
        verdicts = "no comparison"
    elif all(possible):
        verdicts = "yes"
    elif not any(possible):
        verdicts = f"no ({paired_seeds(prim)} paired seeds)"
    else:
        verdicts = f"{sum(possible)} of {len(possible)} methods"
    return (
        *(v for _, v in s.key),
        str(len(p.analysis.methods) - 1),
        paired_seeds(prim),
        verdicts,
        *map(str, counts),
        (p.out / page).relative_to(out).as_posix(),
    )


def index_table(
    table: ResultsTable, parts: list[ReportParts], out: Path, page: str = "report.md"
) -> Table:
    """One row per stratum (`index_row`), its last column linking to the stratum's ``page``
    (report.md for the markdown index, report.html for the page)."""
    rows = tuple(index_row(s, p, out, page) for s, p in zip(table.strata, parts))
    numeric = (*(False,) * len(table.by), True, False, False, True, True, True, False)
    header = (*table.by, *INDEX_COLUMNS)
    return Table(header, rows, numeric, link=len(header) - 1)


def intro(table: ResultsTable, inputs: ReportInputs) -> list[str]:
    """The sentences under the index's title (markdown): what was compared, from where."""
    return [
        f"{len(table.strata)} comparisons, one per {', '.join(table.by)}, each against "
        f"**{inputs.baseline}** with its own Holm family, from `{table.path}` "
        f"({table.layout} layout, {len(table.benchmarks)} benchmarks: "
        f"{', '.join(table.benchmarks)}).",
        "Each folder holds the stratum's full report; its statistics are also in "
        "`statistics.csv` (the stratum's columns first).",
    ]


def index_markdown(
    table: ResultsTable, parts: list[ReportParts], inputs: ReportInputs, out: Path
) -> str:
    """The text of the top ``report.md``: index, then each stratum's report as a section."""
    md = [
        f"# {inputs.title}",
        "",
        " ".join(intro(table, inputs)),
        "",
        *(f"- note: {n}" for n in table.notes),
        *([""] if table.notes else []),
        "## Index",
        "",
        *markdown(index_table(table, parts, out)),
        "",
    ]
    for s, p in zip(table.strata, parts):
        md += [f"## {s.label}", "", *_section(p, out), ""]
    if parts:
        md += ["## How this report was produced", "", *(f"- {t}" for t in parts[0].prov.lines())]
    md += ["", "## Definitions", "", definitions(inputs.options)]
    return "\n".join(md)


def index_html(
    table: ResultsTable, parts: list[ReportParts], inputs: ReportInputs, out: Path
) -> str:
    """The text of the top ``report.html``: the index linking each stratum's report.html, then
    each stratum's headline and verdict table (`html_report.render_index`)."""
    pages = [
        StratumPage(
            (p.out / "report.html").relative_to(out).parent.as_posix(),
            s.label,
            (p.out / "report.html").relative_to(out).as_posix(),
            p.analysis,
            p.fmt,
        )
        for s, p in zip(table.strata, parts)
    ]
    return render_index(
        inputs.title,
        intro(table, inputs),
        table.notes,
        index_table(table, parts, out, "report.html"),
        pages,
        parts[0].prov if parts else provenance.current(),
        definitions(inputs.options),
    )


def _section(p: ReportParts, out: Path) -> list[str]:
    """A stratum's report.md without its title, provenance and definitions (the index has them
    once), headings one level down, plots linked from ``out``."""
    text = render_markdown(p.analysis, p.inputs, p.fmt, p.plots, out, p.prov)
    body = text.split("\n## How this report was produced", 1)[0].strip().splitlines()[1:]
    while body and not body[0].strip():
        body.pop(0)
    return [re.sub(r"^(#{1,5}) ", r"#\1 ", line) for line in body]


def check_strata_inputs(table: ResultsTable) -> None:
    """Stratum columns must not collide with the statistics columns of ``statistics.csv``."""
    clash = [c for c in table.by if c in STATISTICS_COLUMNS]
    if clash:
        raise ConfigError(
            f"--by {', '.join(clash)}: also a column of statistics.csv; rename it in {table.path}"
        )
