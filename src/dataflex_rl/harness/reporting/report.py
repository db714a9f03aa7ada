"""``report.md``, ``statistics.csv`` and plots from result rows (a compare, or external CSV).

``compare`` and ``report`` both go through `prepare_report` and `write_report_files`, so both
give the same statistics, tables and sentences.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from dataflex_rl.core.io import atomic_path, atomic_write_text
from dataflex_rl.harness.reporting import narrative, plots, provenance
from dataflex_rl.harness.reporting.document import (
    Document,
    Facts,
    Figure,
    Heading,
    Items,
    Legend,
    Paragraph,
    Section,
    markdown,
)
from dataflex_rl.harness.reporting.html_report import html
from dataflex_rl.harness.reporting.narrative import Fmt
from dataflex_rl.harness.reporting.provenance import Provenance
from dataflex_rl.harness.statistics.analysis import (
    BETTER,
    WORSE,
    Analysis,
    StatsOptions,
    SummaryResult,
    analyze,
)
from dataflex_rl.harness.statistics.results import Row
from dataflex_rl.tracking import Tracker, TrackingConfig

DEFINITIONS = """\
- **mean [95% CI]**: mean over seeds, t interval mean ± t(0.975, n-1)·s/√n.
- **Δ [95% CI]**: mean paired difference method − baseline over seeds both have, with a
  paired-bootstrap percentile interval ({n_boot} resamples of the seeds' differences).
- **p**: two-sided paired permutation test of the mean difference by sign flips (all 2^n sign
  patterns when n ≤ 16: exact; the smallest possible p is 2/2^n).
- **p (Holm)**: Holm's step-down adjustment over the methods compared under the same summary.
- **corrected CI**: the bootstrap interval at level 1 − α/(m − i + 1), i the method's rank by
  raw p among the m methods (Holm's per-step level; ties take the smaller rank).
- **verdict**: "better"/"worse" only when p (Holm) ≤ α **and** the corrected interval excludes
  zero; otherwise "no detectable difference".
- **n/a (N seeds)**: no verdict is possible at N paired seeds, whatever the scores: the
  smallest Holm-adjusted p the exact test can give there (2/2^N, times up to the family size)
  is above α; no interval is shown (statistics.csv: `verdict_possible` False, interval cells
  empty, the floor in `p_holm_floor`).
- **at ±M** (a margin M, `--margin`): one-sided sign-flip tests of the paired differences
  shifted by the margin, each Holm-adjusted over the methods of the summary: "not worse by more
  than M" (non-inferior) rejects Δ ≤ −M on the differences + M; "worse by more than M"
  (inferior) rejects Δ ≥ −M; "equivalent within ±M" is TOST, the larger p of Δ ≤ −M and Δ ≥ M
  (it implies non-inferior); otherwise "undecided", with the paired seeds at which a
  non-inferiority verdict is reached with probability {power:g} if the method equals the
  baseline (simulated at its SD of paired differences; the smallest one-sided p is 1/2^n).
- **MDE**: the smallest true mean difference that this verdict rule (exact sign-flip test,
  Holm over the comparison's family, corrected bootstrap interval) calls "better" with
  probability {power:g} at α = {alpha:g}, simulated at the comparison's paired seeds and observed
  SD of paired differences s_d, the other comparisons of the family taken as null;
  "none" when the seed count allows no verdict.
- **r**: Pearson correlation across paired seeds between the method's and the baseline's
  final scores (how much pairing by seed removes).
- **controls**: arms with a known answer, each tested on its own against the baseline
  (outside the real methods' Holm family, so they do not weaken the real comparisons) and left
  out of rankings and aggregates. A control "passed" when it got its required verdict (an A/A
  copy: no detectable difference; a planted harm: worse), "FAILED" otherwise, and is
  "untested (N seeds: no verdict possible; needs M)" where its N paired seeds allow no verdict
  (M: the fewest at which a family of one can reach one, 2/2^M ≤ α).
- **IQM**, **P(>baseline)**, **profile**: interquartile mean of the run × benchmark scores,
  probability that a random run beats a random baseline run on a benchmark (averaged over
  benchmarks; unpaired), fraction of run × benchmark scores above a threshold; 95% stratified
  bootstrap (runs resampled within each benchmark) (Agarwal et al. 2021).
- **average**: per run, the mean over domains (each domain weighs the same) or over benchmarks
  when no domains are given; Kendall's tau-b compares the method rankings of two summaries.
"""


@dataclass
class Failure:
    """A run that did not finish: which, the error line and the traceback."""

    method: str
    seed: str
    error: str
    traceback: str = ""


@dataclass
class ReportInputs:
    """Everything a report is made of besides the rows: ``setup`` lines, ``controls`` (see
    `analysis.analyze`), ``tracking`` (None: no trackers) with ``params`` (dotted keys), and
    the caller's own ``sections``, placed after the verdicts and the forest plot."""

    title: str
    baseline: str
    options: StatsOptions = field(default_factory=StatsOptions)
    setup: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    proportions: list[dict] = field(default_factory=list)
    plots: bool = True
    controls: dict[str, str] = field(default_factory=dict)
    tracking: TrackingConfig | None = None
    params: dict = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)


def report_document(parts: ReportParts) -> Document:
    """The report of ``parts`` as a `document.Document`: every section, in page order, built
    from the stored analysis (report.md, report.html and the terminal render this one)."""
    a, inputs, fmt, figures = parts.analysis, parts.inputs, parts.fmt, parts.plots
    s = a.primary

    def figs(*keys: str) -> list[Section]:
        return [Section(k, FIGURES[k][0], (_figure(k, figures),)) for k in keys if k in figures]

    def sentences(x: SummaryResult) -> Items:
        return Items(tuple(narrative.verdict_sentences(a, x, fmt)))

    secs = [
        Section(
            "sensitivity",
            "Sensitivity of this instrument",
            (Items(tuple(narrative.sensitivity_lines(a, fmt))),),
        ),
        Section(
            "verdicts",
            f"Verdicts on '{s.name}'",
            (narrative.summary_table(s, fmt, a.options.margin), Legend(), sentences(s)),
        ),
        *figs("forest"),
        Section(
            "scores",
            f"Scores on '{s.name}', decision metric first",
            (narrative.scores_table(a, fmt),),
        ),
        *inputs.sections,
        *figs("curves", "tokens"),
    ]
    if len(a.summaries) > 1:
        body = [
            b
            for x in a.summaries[:-1]
            for b in (
                Heading(x.name),
                narrative.summary_table(x, fmt, a.options.margin),
                sentences(x),
            )
        ]
        said = narrative.ranking_sentences(a) + narrative.sign_changes(a)
        ranking = (narrative.ranking_table(a), Paragraph("Kendall's tau-b between rankings:"))
        ranking += (narrative.tau_table(a), *([Items(tuple(said))] if said else []))
        secs += [
            Section("per-summary", "Per benchmark / domain", tuple(body)),
            Section("ranking", "Ranking", ranking),
        ]
    if a.aggregates:
        profile = [_figure(k, figures) for k in ("profiles",) if k in figures]
        table = narrative.aggregate_table(a.aggregates, a.baseline, fmt)
        secs.append(Section("aggregates", "Aggregates over runs × benchmarks", (table, *profile)))
    secs += figs("proportions")
    if inputs.failures:
        errors = tuple(f"**{f.method}**, seed {f.seed}: `{f.error}`" for f in inputs.failures)
        tracebacks = tuple(f.traceback for f in inputs.failures)
        secs.append(Section("failures", "Failed runs", (Items(errors, tracebacks),)))
    secs.append(Section("setup", "Setup", (Items(tuple(setup_lines(a, inputs))),)))
    secs += closing_sections(parts.prov, a.options)
    return Document(inputs.title, " ".join(narrative.headline(a, fmt)), tuple(secs), parts.out)


#: figure key of `report_parts` (also its section id) -> (title, alt text)
FIGURES = {
    "forest": ("Forest plot", "paired deltas against the baseline per summary"),
    "curves": ("Learning curves", "mean held-out score per method and checkpoint"),
    "tokens": (
        "Accuracy against generated tokens (equal generation cost)",
        "mean held-out score per method against the generation cost spent",
    ),
    "profiles": ("Performance profiles", "fraction of scores above each threshold"),
    "proportions": ("Domain proportions", "mixers' domain proportions per step"),
}


def _figure(key: str, figures: dict[str, Path]) -> Figure:
    return Figure(figures[key], *FIGURES[key])


def closing_sections(prov: Provenance, o: StatsOptions) -> list[Section]:
    """The last sections of every report: what produced it, and the definitions."""
    facts = provenance_facts(prov, o)
    return [
        Section("provenance", "How this report was produced", (facts,)),
        Section("definitions", "Definitions", (definitions(o),)),
    ]


def provenance_facts(prov: Provenance, o: StatsOptions) -> Facts:
    """What wrote the report (command, folder, time, source, versions) and the statistics
    options, values in markdown."""
    facts = [("command", f"`{prov.command}`"), ("in", f"`{prov.cwd}`")]
    facts.append(("written", prov.written))
    if prov.source:
        facts.append(("dataflex-rl source", f"git `{prov.source}`"))
    facts.append(("versions", ", ".join(f"{n} {v}" for n, v in prov.versions)))
    stats = (
        f"α = {o.alpha:g}, power {o.power:g}, {o.n_boot} bootstrap resamples, "
        f"{o.n_perm} random sign flips above 16 seeds, seed {o.seed}"
        + (f", margin {o.margin:g} (score units)" if o.margin > 0 else "")
    )
    return Facts((*facts, ("statistics", stats)))


def definitions(o: StatsOptions) -> Items:
    """`DEFINITIONS` with the options' numbers, one item per term."""
    text = DEFINITIONS.format(n_boot=o.n_boot, alpha=o.alpha, power=o.power)
    parts = re.split(r"^- ", text, flags=re.M)
    return Items(tuple(" ".join(p.split()) for p in parts if p.strip()))


def setup_lines(a: Analysis, inputs: ReportInputs) -> list[str]:
    """The Setup list (markdown items): baseline, methods, controls, seeds, the caller's
    lines, the analysis' notes, failed runs."""
    controls = ", ".join(f"{k} ({v})" for k, v in a.controls.items())
    out = [
        f"baseline: **{a.baseline}**; methods: {', '.join(a.methods[1:])}"
        + (f"; controls: {controls}" if controls else ""),
        f"seeds ({len(a.seeds)}): {', '.join(a.seeds)}",
        *inputs.setup,
        *(f"note: {n}" for n in a.notes),
    ]
    if inputs.failures:
        out.append(
            f"**{len(inputs.failures)} run(s) failed** (see 'Failed runs'); the statistics use "
            "the runs that finished."
        )
    return out


#: columns of ``statistics.csv``: one row per summary × method (a baseline row leaves the
#: comparison's columns empty and reads "baseline" under ``verdict``). Where no verdict is
#: possible (``verdict_possible`` False) the interval columns are empty. ``control_passed``
#: is True/False, empty for an untested control; ``control_status`` says it in words
#: (`analysis.control_status`: passed, FAILED or "untested (N seeds: ...; needs M)").
#: ``seeds_for_verdict``: the fewest paired seeds at which the family can reach a verdict; the
#: margin columns ``p_noninferior`` ... ``seeds_for_margin`` are empty without a margin
#: (`analysis.Comparison`, docs/analysis.md).
STATISTICS_COLUMNS = tuple(
    "summary kind method n mean ci_low ci_high n_pairs delta delta_ci_low delta_ci_high "
    "corrected_level corrected_ci_low corrected_ci_high p p_holm p_holm_floor verdict_possible "
    "sd_diff mde corr verdict control control_passed control_status seeds_for_verdict "
    "p_noninferior p_noninferior_holm p_inferior p_inferior_holm p_equivalent p_equivalent_holm "
    "margin_verdict seeds_for_margin".split()
)
#: the `analysis.Comparison` attributes written under their own name
_SAME = (
    "n_pairs delta p p_holm p_holm_floor verdict_possible sd_diff mde corr verdict control "
    "control_status seeds_for_verdict p_noninferior p_noninferior_holm p_inferior "
    "p_inferior_holm p_equivalent p_equivalent_holm margin_verdict seeds_for_margin".split()
)


def _cell(v):
    """A CSV cell: NaN is an empty cell (pandas reads it back as NaN)."""
    return "" if isinstance(v, float) and math.isnan(v) else v


def write_csv(rows: list[dict], columns, path: str | Path, extra: str = "raise") -> Path:
    """Write ``rows`` (mappings over ``columns``; another key: ``extra``, "raise" or
    "ignore") as a CSV with that header."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(p) as tmp, tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction=extra)
        w.writeheader()
        w.writerows(rows)
    return p


def statistics_rows(a: Analysis) -> list[dict]:
    """The rows of ``statistics.csv`` as mappings over `STATISTICS_COLUMNS` (NaN as "")."""
    out = []
    for s in a.summaries:
        comps = {c.method: c for c in s.comparisons + s.controls}
        for m in s.methods + s.control_methods:
            row = dict.fromkeys(STATISTICS_COLUMNS, "")
            row.update(summary=s.name, kind=s.kind, method=m.method, n=m.n, mean=m.mean)
            row.update(ci_low=m.low, ci_high=m.high)
            c = comps.get(m.method)
            if c is None:
                row["verdict"] = "baseline"
            else:
                row.update({k: getattr(c, k) for k in _SAME}, corrected_level=1 - c.level)
                row.update(delta_ci_low=c.ci[0], delta_ci_high=c.ci[1])
                row.update(corrected_ci_low=c.corrected_ci[0], corrected_ci_high=c.corrected_ci[1])
                row["control_passed"] = "" if c.control_passed is None else c.control_passed
            out.append({k: _cell(v) for k, v in row.items()})
    return out


@dataclass
class ReportParts:
    """A report's pieces, which the renderers read: ``plots`` name -> PNG written, ``prov``
    what produced it (`provenance.current`)."""

    analysis: Analysis
    fmt: Fmt
    plots: dict[str, Path]
    inputs: ReportInputs
    out: Path
    prov: Provenance


def prepare_report(
    rows: list[Row], out_dir: str | Path, inputs: ReportInputs, prov: Provenance | None = None
) -> ReportParts:
    """Analyze ``rows`` (every number the report prints: `analysis_of`) and draw the
    plots under ``out_dir``/plots (`report_parts`; no text files yet)."""
    return report_parts(analysis_of(rows, inputs), out_dir, inputs, prov)


def analysis_of(rows: list[Row], inputs: ReportInputs) -> Analysis:
    """The analysis a report of ``rows`` prints (`analysis.analyze` with the inputs' baseline,
    options, controls and proportions, and the seeds a 1-point difference needs)."""
    kw = {"controls": inputs.controls, "proportions": inputs.proportions, "seeds_needed": True}
    return analyze(rows, inputs.baseline, inputs.options, **kw)


def report_parts(
    a: Analysis, out_dir: str | Path, inputs: ReportInputs, prov: Provenance | None = None
) -> ReportParts:
    """The plots of a stored analysis under ``out_dir``/plots, and the pieces the text files
    are written from (``prov`` default: this process)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fmt = Fmt.of(a)
    files: dict[str, Path] = {}
    skipped = "plots skipped: matplotlib is not installed (pip install matplotlib)"
    if inputs.plots and importlib.util.find_spec("matplotlib") is None:
        a.notes += [skipped] if skipped not in a.notes else []  # once, if rendered again
    elif inputs.plots:
        d = out / "plots"
        drawn = {
            "forest": plots.forest_plot(a, d / "forest.png", fmt),
            "curves": plots.learning_curves(a, d / "learning_curves.png", fmt),
            "tokens": plots.learning_curves(a, d / "accuracy_vs_tokens.png", fmt, by_tokens=True),
            "proportions": plots.proportion_traces(a.traces, d / "proportions.png"),
        }
        if a.profiles is not None:
            drawn["profiles"] = plots.performance_profiles(a.profiles, d / "profiles.png", fmt)
        files = {k: v for k, v in drawn.items() if v is not None}
    return ReportParts(a, fmt, files, inputs, out, prov or provenance.current())


def render_report(a: Analysis, out_dir: str | Path, inputs: ReportInputs) -> ReportParts:
    """Write the report of a stored analysis: `report_parts`, then `write_report_files`."""
    return write_report_files(report_parts(a, out_dir, inputs))


def write_report(rows: list[Row], out_dir: str | Path, inputs: ReportInputs) -> Analysis:
    """Analyze ``rows`` and write ``report.md``, ``report.html`` (the same, one self-contained
    page), ``statistics.csv`` and ``plots/*.png``: `prepare_report`, then `write_report_files`."""
    return write_report_files(prepare_report(rows, out_dir, inputs)).analysis


def write_report_files(parts: ReportParts) -> ReportParts:
    """``statistics.csv``, ``report.md`` and ``report.html`` of ``parts``, and the trackers'
    run; returns ``parts``."""
    a, out, inputs = parts.analysis, parts.out, parts.inputs
    write_csv(statistics_rows(a), STATISTICS_COLUMNS, out / "statistics.csv")
    write_pages(parts)
    if inputs.tracking is not None and inputs.tracking.backends:
        track_report(a, out, inputs.tracking, inputs.params, list(parts.plots.values()))
    return parts


def write_pages(parts: ReportParts) -> Document:
    """``report.md`` and ``report.html`` of ``parts``, both rendered from `report_document`
    (a caller that adds a section after the report was written rewrites both with this)."""
    doc = report_document(parts)
    atomic_write_text(parts.out / "report.md", markdown(doc))
    atomic_write_text(parts.out / "report.html", html(doc))
    return doc


def report_metrics(a: Analysis) -> dict[str, float]:
    """The summary tables as tracker metrics ``report/<summary>/<method>/<quantity>``
    (``verdict`` +1 better, -1 worse, 0 otherwise; docs/tracking.md)."""
    out: dict[str, float] = {}
    for s in a.summaries:
        for m in s.methods + s.control_methods:
            key = f"report/{s.name}/{m.method}"
            out.update(
                {f"{key}/mean": m.mean, f"{key}/mean_low": m.low, f"{key}/mean_high": m.high}
            )
        for c in s.comparisons + s.controls:
            key = f"report/{s.name}/{c.method}"
            sign = {BETTER: 1.0, WORSE: -1.0}.get(c.verdict, 0.0)
            out.update(
                {
                    f"{key}/delta": c.delta,
                    f"{key}/delta_low": c.ci[0],
                    f"{key}/delta_high": c.ci[1],
                    f"{key}/corrected_low": c.corrected_ci[0],
                    f"{key}/corrected_high": c.corrected_ci[1],
                    f"{key}/p": c.p,
                    f"{key}/p_holm": c.p_holm,
                    f"{key}/mde": c.mde,
                    f"{key}/verdict": sign,
                    f"{key}/decided": abs(sign),
                    f"{key}/verdict_possible": float(c.verdict_possible),
                }
            )
    return out


def track_report(
    a: Analysis, out: Path, tracking: TrackingConfig, params: dict, plot_files: list[Path]
) -> None:
    """Log the report as one tracker run (kept in ``<out>/tracking.json``): `report_metrics`
    at step = seeds analyzed, options and ``params``, plots and text files as artifacts."""
    step = len(a.seeds)
    stats = {f"statistics.{k}": getattr(a.options, k) for k in ("alpha", "power", "n_boot", "seed")}
    params = {**params, "baseline": a.baseline, "methods": ", ".join(a.methods), **stats}
    tags = {"kind": "report", "baseline": a.baseline}
    with Tracker.start(tracking, out, params=params, tags=tags, first_step=step) as tracker:
        tracker.log("report", step, report_metrics(a))
        tracker.log_files(images=plot_files, files=[out / "report.md", out / "statistics.csv"])
