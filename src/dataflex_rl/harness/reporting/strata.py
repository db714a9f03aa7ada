"""One comparison per stratum (``report --by model,campaign,regime``): a folder each, plus an
index.

Each stratum is compared against its own reference in ``<stratum>/``; the top files index them
(docs/harness.md, "External results").
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from dataflex_rl.core.io import atomic_write_text
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting import narrative, provenance
from dataflex_rl.harness.reporting.document import (
    Document,
    Items,
    Legend,
    Link,
    Paragraph,
    Section,
    Table,
    markdown,
)
from dataflex_rl.harness.reporting.html_report import html
from dataflex_rl.harness.reporting.narrative import paired_seeds
from dataflex_rl.harness.reporting.report import (
    STATISTICS_COLUMNS,
    ReportInputs,
    ReportParts,
    closing_sections,
    prepare_report,
    report_parts,
    statistics_rows,
    write_csv,
    write_report_files,
)
from dataflex_rl.harness.statistics.analysis import BETTER, NO_DIFF, WORSE, Analysis
from dataflex_rl.harness.statistics.results_table import EMPTY, ResultsTable, Stratum, slug


def references(table: ResultsTable, requested: tuple[str, ...] = ()) -> list[str | None]:
    """The reference of each stratum: the first of ``requested`` among its methods (default
    "baseline" if any stratum has it, else the file's first method); None where none is."""
    first = list(dict.fromkeys(r.method for r in table.rows))
    names = list(requested) or (["baseline"] if "baseline" in first else first[:1])
    refs = [next((b for b in names if b in s.methods), None) for s in table.strata]
    if not any(refs):
        where = " in any stratum" if table.by else ""
        raise ConfigError(
            f"--baseline {','.join(names)!r}: not a method of {table.path}{where}; "
            f"methods: {', '.join(first)}"
        )
    return refs


def skip_reason(s: Stratum, ref: str | None, requested: tuple[str, ...] = ()) -> str:
    """Why stratum ``s`` with reference ``ref`` gets no comparison ("" when it gets one)."""
    if ref is None:
        names = ", ".join(requested) or "baseline"
        return f"no reference ({names}) among its methods: {', '.join(s.methods)}"
    if len(s.methods) == 1:
        return f"a single method ({ref}): nothing to compare it with"
    return ""


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
    table: ResultsTable,
    out_dir: str | Path,
    inputs: ReportInputs,
    requested: tuple[str, ...] = (),
    workers: int | None = None,
    analyses: tuple[Analysis | None, ...] | None = None,
) -> list[ReportParts | None]:
    """Write one report per stratum of ``table`` (``workers`` at once) and the index; the
    `ReportParts` of each stratum, None where not compared (`skip_reason`). ``analyses``:
    each stratum's, already made (`report.analysis_of`; default: made here)."""
    check_strata_inputs(table)
    requested = requested or ((inputs.baseline,) if inputs.baseline else ())
    refs = references(table, requested)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance.current()
    jobs = [
        (
            s.rows,
            out / folder,
            stratum_inputs(inputs, s, ref),
            prov,
            a,
        )
        for s, folder, ref, a in zip(
            table.strata, folders(table.strata), refs, analyses or [None] * len(refs)
        )
        if not skip_reason(s, ref)
    ]
    done = iter(_in_processes(jobs, workers))
    parts = [None if skip_reason(s, r) else next(done) for s, r in zip(table.strata, refs)]
    stats = [
        {**s.values, **row}
        for s, p in zip(table.strata, parts)
        if p is not None
        for row in statistics_rows(p.analysis)
    ]
    write_csv(stats, [*table.by, *STATISTICS_COLUMNS], out / "statistics.csv")
    doc = index_document(table, parts, refs, inputs, out, requested)
    atomic_write_text(out / "report.md", markdown(doc))
    atomic_write_text(out / "report.html", html(doc))
    return parts


def stratum_inputs(inputs: ReportInputs, s: Stratum, ref: str | None) -> ReportInputs:
    """The inputs of stratum ``s``'s own report: its reference, title, setup line and
    tracker parameters."""
    return replace(
        inputs,
        baseline=ref or "",
        title=f"{inputs.title} — {s.label}",
        setup=[*inputs.setup, f"stratum: {s.label} ({len(s.rows)} scores)"],
        params={**inputs.params, **{f"stratum.{c}": v for c, v in s.key}},
    )


def _report_stratum(job: tuple) -> ReportParts:
    """One stratum's report (`prepare_report`, or `report_parts` of its analysis, then
    `write_report_files`)."""
    rows, out, inputs, prov, a = job
    parts = (
        prepare_report(rows, out, inputs, prov) if a is None else report_parts(a, out, inputs, prov)
    )
    return write_report_files(parts)


def _in_processes(jobs: list[tuple], workers: int | None) -> list[ReportParts]:
    """`_report_stratum` of every job, in order: in up to ``workers`` forked processes
    (strata are independent; each draws its own plots), in this one where fork is not
    available or one worker suffices. The same reports either way."""
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_report_stratum(j) for j in jobs]
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_report_stratum, jobs))


#: the index's columns after the stratum's own
INDEX_COLUMNS = ("reference", "methods", "paired seeds", "verdict possible", "better", "worse")
INDEX_COLUMNS += ("no detectable difference", "report")


def index_row(s: Stratum, p: ReportParts | None, ref: str | None, out: Path) -> tuple[str, ...]:
    """The index's cells of one stratum: its values, then `INDEX_COLUMNS` (``report``: its
    page relative to ``out``, without extension)."""
    values = tuple(v or EMPTY for _, v in s.key)
    if p is None:
        not_compared = ("—", "not compared (see the notes)", "", "", "", "")
        return (*values, ref or "none", str(len(s.methods) - 1), *not_compared)
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
        *values,
        p.analysis.baseline,
        str(len(p.analysis.methods) - 1),
        paired_seeds(prim),
        verdicts,
        *map(str, counts),
        (p.out / "report").relative_to(out).as_posix(),
    )


def index_document(
    table: ResultsTable,
    parts: list[ReportParts | None],
    refs: list[str | None],
    inputs: ReportInputs,
    out: Path,
    requested: tuple[str, ...] = (),
) -> Document:
    """The top report of a report per stratum: the index (one row per stratum, linking its own
    report; strata not compared named in the notes with the reason), then each compared
    stratum's headline, verdict table and sentences, what produced it, the definitions."""
    rows = tuple(index_row(s, p, r, out) for s, p, r in zip(table.strata, parts, refs))
    numeric = (*(False,) * len(table.by), False, True, False, False, True, True, True, False)
    header = (*table.by, *INDEX_COLUMNS)
    index = Table(header, rows, numeric, link=len(header) - 1)
    skipped = [
        f"{s.label}: not compared, {skip_reason(s, r, requested)}"
        for s, r in zip(table.strata, refs)
        if skip_reason(s, r)
    ]
    notes = [f"note: {n}" for n in [*table.notes, *skipped]]
    secs = [Section("index", "Index", (*([Items(tuple(notes))] if notes else []), index, Legend()))]
    done = [(s, p) for s, p in zip(table.strata, parts) if p is not None]
    for s, p in done:
        a, page = p.analysis, (p.out / "report").relative_to(out).as_posix()
        secs.append(
            Section(
                p.out.relative_to(out).as_posix(),
                s.label,
                (
                    Paragraph(" ".join(narrative.headline(a, p.fmt))),
                    narrative.summary_table(a.primary, p.fmt, a.options.margin),
                    Items(tuple(narrative.verdict_sentences(a, a.primary, p.fmt))),
                    Link("Full report", page),
                ),
            )
        )
    secs += closing_sections(done[0][1].prov if done else provenance.current(), inputs.options)
    compared = sorted({r for r in refs if r})
    lead = (
        f"{len(done)} of {len(table.strata)} strata compared, one per {', '.join(table.by)}, each "
        f"against its reference ({', '.join(f'**{r}**' for r in compared)}) with its own Holm "
        f"family, from `{table.path}` ({table.layout} layout, {len(table.benchmarks)} "
        f"benchmarks: {', '.join(table.benchmarks)}). Each folder holds the stratum's full "
        "report; its statistics are also in `statistics.csv` (the stratum's columns first)."
    )
    return Document(inputs.title, lead, tuple(secs), out)


def check_strata_inputs(table: ResultsTable) -> None:
    """Stratum columns must not collide with the statistics columns of ``statistics.csv``."""
    clash = [c for c in table.by if c in STATISTICS_COLUMNS]
    if clash:
        raise ConfigError(
            f"--by {', '.join(clash)}: also a column of statistics.csv; rename it in {table.path}"
        )
