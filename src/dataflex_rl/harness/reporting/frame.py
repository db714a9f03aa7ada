"""The comparison as a library (docs/analysis.md): `analyze` a pandas DataFrame in the long or
wide layout ``report`` reads, with its checks and one-line errors; the `Report` it returns
holds the stored analyses and renders them with the one document renderer (markdown, HTML,
Jupyter) or writes exactly what ``report`` writes. `tracker_frame` reads a tracker store's runs
into such a DataFrame. pandas is imported only here, when used; nothing here imports torch.
"""

from __future__ import annotations

import io
import re
import tempfile
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from dataflex_rl.core.config import validate
from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.deps import require
from dataflex_rl.harness.reporting import provenance
from dataflex_rl.harness.reporting.document import Document, markdown
from dataflex_rl.harness.reporting.gate import GateResult, gate
from dataflex_rl.harness.reporting.html_report import CSS, html, page_body
from dataflex_rl.harness.reporting.narrative import Fmt
from dataflex_rl.harness.reporting.report import (
    STATISTICS_COLUMNS,
    ReportInputs,
    ReportParts,
    analysis_of,
    render_report,
    report_document,
    report_parts,
    statistics_rows,
    write_csv,
)
from dataflex_rl.harness.reporting.strata import (
    folders,
    index_document,
    references,
    skip_reason,
    stratum_inputs,
    write_strata_report,
)
from dataflex_rl.harness.statistics.analysis import Analysis, StatsOptions
from dataflex_rl.harness.statistics.results_table import (
    DESCRIPTIVE,
    ResultsTable,
    Stratum,
    read_frame,
)

#: the columns of `Report.verdicts` (then the ``by`` columns' values first)
VERDICT_COLUMNS = tuple(
    "method baseline n_pairs delta delta_ci_low delta_ci_high corrected_ci_low "
    "corrected_ci_high p p_holm verdict mde seeds_for_verdict p_noninferior_holm "
    "p_equivalent_holm p_inferior_holm margin_verdict seeds_for_margin".split()
)
#: the CSS of report.html scoped to the element that holds a report in a notebook
_ROOT = ".dataflex-report"


def analyze(
    frame,
    *,
    method: str = "method",
    seed: str = "seed",
    metrics: list[str] | tuple[str, ...] | None = None,
    baseline: str | list[str] | tuple[str, ...] | None = None,
    by: str | list[str] | tuple[str, ...] = (),
    margin: float = 0.0,
    wide: bool | None = None,
    scale: float = 1.0,
    domains: dict[str, str] | None = None,
    statistics: dict | None = None,
    title: str | None = None,
) -> Report:
    """The comparison of ``frame`` as ``dataflex-rl report`` makes it.

    Args:
        frame: a pandas DataFrame, long (columns method, seed, benchmark, score[, domain,
            step]) or wide (a row per run: method, seed, descriptive columns, a numeric column
            per benchmark); ``wide`` None detects which, as ``report`` does.
        method, seed: the columns holding the method and the seed (renamed to those).
        metrics: the benchmarks compared (wide: their columns; long: their names); default
            every one.
        baseline: the reference; a list: in each stratum the first present (``--baseline``).
        by: columns that split the rows into strata, one comparison each (``--by``).
        margin: non-inferiority and equivalence margin in score units (0.01: 1 point).
        scale, domains: as ``--scale`` and ``--domains`` (a mapping benchmark -> domain).
        statistics: the other keys of an experiment's ``statistics:`` block (alpha, power,
            n_boot, n_perm, seed).
        title: the report's title (default "Comparison: DataFrame").

    ConfigError (one line, naming the column, row or key) on bad input.
    """
    stats = dict(statistics or {})
    if "margin" in stats:
        raise ConfigError("statistics: give the margin as analyze(..., margin=M)")
    options = validate(StatsOptions, {**stats, "margin": margin}, "statistics")
    by = (by,) if isinstance(by, str) else tuple(by)
    frame = _named(frame, method, seed, metrics, wide, by)
    table = read_frame(frame, wide=wide, by=by, scale=scale, domains=domains)
    setup = [
        f"results: a DataFrame ({table.layout} layout, {len(table.rows)} scores; benchmarks "
        f"{', '.join(table.benchmarks)})" + (f"; scores × {scale:g}" if scale != 1.0 else ""),
        *frame.attrs.get("dataflex_rl.setup", ()),
        *table.notes,
    ]
    requested = (baseline,) if isinstance(baseline, str) else tuple(baseline or ())
    inputs = ReportInputs(
        title=title or "Comparison: DataFrame", baseline="", options=options, setup=setup
    )
    return Report.of(table, inputs, requested)


def _named(frame, method: str, seed: str, metrics, wide: bool | None, by: tuple[str, ...]):
    """``frame`` with its method and seed columns named so, and only the ``metrics``."""
    columns = [str(c) for c in frame.columns]
    for arg, col in (("method", method), ("seed", seed)):
        if col not in columns:
            raise ConfigError(
                f"{arg}={col!r}: not a column of the DataFrame.{suggest(col, columns)} "
                f"Columns: {', '.join(columns)}"
            )
    frame = frame.rename(columns={method: "method", seed: "seed"})
    if metrics is None:
        return frame
    long = not wide and ("benchmark" in frame.columns or "score" in frame.columns)
    known = list(dict.fromkeys(frame["benchmark"].astype(str))) if long else columns
    for m in metrics:
        if m not in known:
            what = "a benchmark of the DataFrame" if long else "a column of the DataFrame"
            raise ConfigError(f"metrics: {m!r} is not {what}.{suggest(m, known)}")
    if long:
        return frame[frame["benchmark"].astype(str).isin(list(metrics))]
    keep = {"method", "seed", *DESCRIPTIVE, *by, *metrics}
    numeric = [c for c in frame.columns if frame[c].dtype.kind in "iufb" and str(c) not in keep]
    return frame.drop(columns=numeric)


def tracker_frame(
    source: str,
    *,
    experiment: str | None = None,
    group: str | None = None,
    tags: tuple[str, ...] | list[str] = (),
    method_field: str | None = None,
    seed_field: str | None = None,
    metrics: str | None = None,
    exclude: tuple[str, ...] | list[str] | None = None,
    step: int | None = None,
    by: tuple[str, ...] | list[str] = (),
):
    """The runs of a tracker store (``mlflow:URI``, ``tensorboard:DIR``, ``wandb:DIR``) as a
    long DataFrame: the ``by`` fields, method, seed, benchmark, step, score, one row per
    run × benchmark × logged step; the options are those of ``report --from-tracker``
    (default: what a ``tracking:`` section writes). `analyze` reads it (``by=`` the same
    fields); ``frame.attrs["dataflex_rl.setup"]`` says which runs were read and skipped."""
    require("pandas", "dataflex_rl.tracker_frame")
    import pandas as pd

    from dataflex_rl.harness.statistics import tracked

    query = tracked.TrackerQuery(
        source,
        experiment=experiment,
        group=group,
        tags=tuple(tags),
        method_field=method_field or tracked.METHOD_FIELD,
        seed_field=seed_field or tracked.SEED_FIELD,
        metrics=metrics or tracked.METRICS,
        exclude=tracked.EXCLUDE if exclude is None else tuple(exclude),
        step=step,
        by=tuple(by),
    )
    found = tracked.read_tracker(query, "dataflex_rl.tracker_frame")
    cols = [*query.by, "method", "seed", "benchmark", "step", "score"]
    records = [
        (*(v for _, v in key), r.method, r.seed, r.benchmark, r.step, r.score)
        for key, r in zip(found.keys, found.rows)
    ]
    frame = pd.DataFrame.from_records(records, columns=cols).astype({"step": "Int64"})
    frame.attrs["dataflex_rl.setup"] = list(found.setup)
    return frame


@dataclass(frozen=True)
class Report:
    """A finished comparison: per stratum of ``table`` (one without ``by``) its stored
    `Analysis` (None where not compared: `strata.skip_reason`), and the ``inputs`` a report
    of it is written with."""

    table: ResultsTable
    inputs: ReportInputs
    requested: tuple[str, ...]
    references: tuple[str | None, ...]
    analyses: tuple[Analysis | None, ...]

    @classmethod
    def of(cls, table: ResultsTable, inputs: ReportInputs, requested: tuple[str, ...]) -> Report:
        """Analyze every stratum of ``table`` (`report.analysis_of`, as ``report`` does)."""
        refs = references(table, requested)
        if not table.by and skip_reason(table.strata[0], refs[0], requested):
            raise ConfigError(f"DataFrame: {skip_reason(table.strata[0], refs[0], requested)}")
        analyses = tuple(
            None
            if skip_reason(s, ref, requested)
            else analysis_of(s.rows, replace(inputs, baseline=ref))
            for s, ref in zip(table.strata, refs)
        )
        return cls(table, inputs, requested, tuple(refs), analyses)

    @property
    def analysis(self) -> Analysis:
        """The stored analysis (without ``by``; with it, see `analyses`)."""
        if self.table.by:
            raise ValueError("a report by strata has one analysis per stratum: use .analyses")
        return self.analyses[0]

    # ------------------------------------------------------------------ DataFrames
    def _rows(self) -> list[dict]:
        """The rows of ``statistics.csv`` (the ``by`` values first) and each one's reference."""
        return [
            {**s.values, **row, "baseline": a.baseline}
            for s, a in zip(self.table.strata, self.analyses)
            if a is not None
            for row in statistics_rows(a)
        ]

    def _frame(self, rows: list[dict], columns: tuple[str, ...]):
        """``rows`` over ``columns`` as pandas reads them from the CSV ``report`` writes."""
        require("pandas", "dataflex_rl.Report")
        import pandas as pd

        with tempfile.TemporaryDirectory() as tmp:
            path = write_csv(rows, [*self.table.by, *columns], Path(tmp) / "t.csv", "ignore")
            return pd.read_csv(io.StringIO(path.read_text()))

    @cached_property
    def statistics(self):
        """``statistics.csv`` as pandas reads it: every summary × method (the ``by`` columns
        first), a baseline row reading "baseline" under ``verdict``."""
        return self._frame(self._rows(), STATISTICS_COLUMNS)

    @cached_property
    def verdicts(self):
        """One row per real comparison on the primary summary (the average), the ``by``
        columns first, then `VERDICT_COLUMNS`."""
        rows = [
            r
            for r in self._rows()
            if r["summary"] == "average" and r["verdict"] != "baseline" and not r["control"]
        ]
        return self._frame(rows, VERDICT_COLUMNS)

    def summary(self, name: str):
        """The rows of one summary (a benchmark, a domain or "average") of `statistics`."""
        s = self.statistics
        names = list(dict.fromkeys(s["summary"]))
        if name not in names:
            raise ConfigError(f"summary {name!r}: not a summary.{suggest(name, names)}")
        return s[s["summary"] == name].reset_index(drop=True)

    def gate(
        self,
        require: str = "better",
        methods: tuple[str, ...] | list[str] = (),
        summary: str | None = None,
    ) -> GateResult:
        """What ``dataflex-rl gate`` decides on this comparison (`gate.gate`)."""
        labels = [s.label if self.table.by else "" for s in self.table.strata]
        done = [(label, a) for label, a in zip(labels, self.analyses) if a is not None]
        return gate(done, require, tuple(methods), summary)

    # ------------------------------------------------------------------ documents
    def _parts(self, out: Path) -> list[ReportParts | None]:
        """The pieces of each stratum's report under ``out``, without plots (no file
        written)."""
        names = folders(self.table.strata) if self.table.by else [""]
        prov = provenance.current()
        return [
            None
            if a is None
            else ReportParts(a, Fmt.of(a), {}, self._inputs(s, ref), out / name, prov)
            for s, a, ref, name in zip(self.table.strata, self.analyses, self.references, names)
        ]

    def _inputs(self, s: Stratum, ref: str | None) -> ReportInputs:
        """The inputs of stratum ``s``'s report (the only one's without ``by``)."""
        if self.table.by:
            return stratum_inputs(self.inputs, s, ref)
        return replace(self.inputs, baseline=ref or "")

    def document(self, out: Path = Path(".")) -> Document:
        """The report as a document, without plots (with ``by``: the index of the strata)."""
        parts = self._parts(out)
        if not self.table.by:
            return report_document(parts[0])
        return index_document(
            self.table, parts, list(self.references), self.inputs, out, self.requested
        )

    def to_markdown(self) -> str:
        """``report.md`` without its plots (``save`` writes them)."""
        return markdown(self.document())

    def _with_plots(self, render) -> str:
        """``render(document)`` with the plots drawn in a temporary folder (inlined by HTML)."""
        if self.table.by:
            return render(self.document())
        with tempfile.TemporaryDirectory() as tmp:
            inputs = self._inputs(self.table.strata[0], self.references[0])
            return render(report_document(report_parts(self.analysis, tmp, inputs)))

    def to_html(self) -> str:
        """``report.html``: one self-contained page, plots inlined."""
        return self._with_plots(html)

    def _repr_html_(self) -> str:
        """The report in a notebook: report.html's body and style sheet, scoped to it."""
        return self._with_plots(
            lambda doc: (
                f"<style>{scoped_css(CSS, _ROOT)}</style>"
                f'<div class="{_ROOT[1:]}">{page_body(doc)}</div>'
            )
        )

    def save(self, folder: str | Path) -> Path:
        """Write exactly what ``dataflex-rl report`` writes for these rows into ``folder``
        (report.md, report.html, statistics.csv, plots; with ``by`` a folder per stratum and
        the index)."""
        out = Path(folder)
        if not self.table.by:
            render_report(
                self.analysis, out, self._inputs(self.table.strata[0], self.references[0])
            )
        else:
            write_strata_report(
                self.table, out, self.inputs, self.requested, analyses=self.analyses
            )
        return out


def scoped_css(css: str, root: str) -> str:
    """``css`` with every rule confined to the elements under ``root`` (``:root``, ``html``
    and ``body`` become ``root`` itself), so a report's style leaves a notebook's alone."""

    def scope(m: re.Match) -> str:
        selectors = [x.strip() for x in m.group(2).split(",")]
        inside = [root if x in (":root", "html", "body") else f"{root} {x}" for x in selectors]
        return f"{m.group(1)}{', '.join(inside)} {{"

    return re.sub(r"(?m)^(\s*)([^@\s{}][^{}]*?)\s*\{", scope, css)
