"""``report.md``, ``statistics.csv`` and plots from result rows (a compare, or external CSV).

`write_report` is the single entry: ``dataflex-rl compare`` calls it after the runs, and
``dataflex-rl report --from-csv FILE`` calls it on external rows, so both give the same
statistics, tables and sentences.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path

from dataflex_rl.harness import narrative, plots
from dataflex_rl.harness.analysis import Analysis, StatsOptions, SummaryResult, analyze
from dataflex_rl.harness.narrative import Fmt, pvalue
from dataflex_rl.harness.results import Row

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
- **MDE**: minimum detectable effect of a paired test at α = {alpha:g} with power {power:g},
  (t(1−α/2, n−1) + t(power, n−1))·s_d/√n, s_d the SD of the paired differences.
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
    """Everything a report is made of besides the rows.

    Args:
        title: the report's title (experiment name or CSV file name).
        baseline: the reference method.
        options: statistics options.
        setup: lines describing the experiment (budget, engine, pairing checks).
        failures: runs that failed.
        proportions: rows of ``proportions.csv`` (mixers), for the trace plot.
        plots: write PNG plots.
    """

    title: str
    baseline: str
    options: StatsOptions = field(default_factory=StatsOptions)
    setup: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    proportions: list[dict] = field(default_factory=list)
    plots: bool = True


def _summary_table(s: SummaryResult, a: Analysis, fmt: Fmt) -> list[str]:
    unit = f" ({fmt.unit})" if fmt.unit else ""
    lines = [f"| method | n | mean{unit} [95% CI] | Δ{unit} [95% CI] | corrected CI (level) "
             "| p | p (Holm) | MDE | verdict |",
             "|---|---:|---|---|---|---:|---:|---:|---|"]
    comps = {c.method: c for c in s.comparisons}
    for m in s.methods:
        head = f"| {m.method} | {m.n} | {fmt.value(m.mean)} {fmt.interval(m.low, m.high)} "
        c = comps.get(m.method)
        if c is None:
            lines.append(head + "| (baseline) | | | | | |")
            continue
        level = f" ({100 * (1 - c.level):.1f}%)" if math.isfinite(c.level) else ""
        lines.append(head + f"| {fmt.value(c.delta, True)} {fmt.interval(*c.ci, True)} "
                     f"| {fmt.interval(*c.corrected_ci, True)}{level} | {pvalue(c.p)} "
                     f"| {pvalue(c.p_holm)} | {fmt.value(c.mde)} | {c.verdict} |")
    return lines


def _ranking_table(a: Analysis) -> list[str]:
    from dataflex_rl.harness.stats import ranks

    names = [s.name for s in a.summaries]
    table = {s.name: ranks([s.mean_of(m) for m in a.methods]) for s in a.summaries}
    lines = ["| method | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for i, m in enumerate(a.methods):
        lines.append(f"| {m} | " + " | ".join(str(int(table[n][i])) for n in names) + " |")
    lines += ["", "Kendall's tau-b between rankings:", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for i, n in enumerate(names):
        lines.append(f"| {n} | " + " | ".join(
            f"{t:.2f}" if math.isfinite(t) else "n/a" for t in a.tau[i]) + " |")
    return lines


def render_markdown(a: Analysis, inputs: ReportInputs, fmt: Fmt, plot_files: dict[str, Path],
                    out_dir: Path) -> str:
    """The text of ``report.md``."""
    o = a.options
    md = [f"# {inputs.title}", "", " ".join(narrative.headline(a, fmt)), ""]
    md += ["## Setup", "", f"- baseline: **{a.baseline}**; methods: {', '.join(a.methods[1:])}",
           f"- seeds ({len(a.seeds)}): {', '.join(a.seeds)}",
           *(f"- {line}" for line in inputs.setup), *(f"- note: {n}" for n in a.notes)]
    if inputs.failures:
        md.append(f"- **{len(inputs.failures)} run(s) failed** (see 'Failed runs'); the "
                  "statistics use the runs that finished.")
    md += ["", f"## Verdicts on '{a.primary.name}'", "", *_summary_table(a.primary, a, fmt), "",
           *(f"- {t}" for t in narrative.verdict_sentences(a, a.primary, fmt)), ""]
    if "forest" in plot_files:
        md += [f"![paired deltas]({plot_files['forest'].relative_to(out_dir)})", ""]
    if len(a.summaries) > 1:
        md += ["## Per benchmark / domain", ""]
        for s in a.summaries[:-1]:
            md += [f"### {s.name}", "", *_summary_table(s, a, fmt), "",
                   *(f"- {t}" for t in narrative.verdict_sentences(a, s, fmt)), ""]
        md += ["## Ranking", "", *_ranking_table(a), "",
               *(f"- {t}" for t in narrative.ranking_sentences(a) + narrative.sign_changes(a)),
               ""]
    for key, title in (("curves", "Learning curves"), ("proportions", "Domain proportions")):
        if key in plot_files:
            md += [f"## {title}", "", f"![{key}]({plot_files[key].relative_to(out_dir)})", ""]
    if inputs.failures:
        md += ["## Failed runs", ""]
        for f in inputs.failures:
            md += [f"- **{f.method}**, seed {f.seed}: `{f.error}`"]
            if f.traceback:
                md += ["", "  <details><summary>traceback</summary>", "", "  ```",
                       *("  " + line for line in f.traceback.rstrip().splitlines()[-30:]),
                       "  ```", "  </details>", ""]
        md.append("")
    md += ["## Definitions", "", DEFINITIONS.format(n_boot=o.n_boot, alpha=o.alpha,
                                                    power=o.power)]
    return "\n".join(md)


def write_statistics_csv(a: Analysis, path: Path) -> Path:
    """One row per summary × method with every number of the tables."""
    cols = ["summary", "kind", "method", "n", "mean", "ci_low", "ci_high", "n_pairs", "delta",
            "delta_ci_low", "delta_ci_high", "corrected_level", "corrected_ci_low",
            "corrected_ci_high", "p", "p_holm", "sd_diff", "mde", "verdict"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for s in a.summaries:
            comps = {c.method: c for c in s.comparisons}
            for m in s.methods:
                c = comps.get(m.method)
                tail = ["", "", "", "", "", "", "", "", "", "", "", "baseline"] if c is None else [
                    c.n_pairs, c.delta, *c.ci, 1 - c.level if math.isfinite(c.level) else "",
                    *c.corrected_ci, c.p, c.p_holm, c.sd_diff, c.mde, c.verdict]
                w.writerow([s.name, s.kind, m.method, m.n, m.mean, m.low, m.high, *tail])
    return path


def write_report(rows: list[Row], out_dir: str | Path, inputs: ReportInputs) -> Analysis:
    """Analyze ``rows`` and write ``report.md``, ``statistics.csv`` and ``plots/*.png``.

    Returns:
        The `Analysis`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    a = analyze(rows, inputs.baseline, inputs.options)
    fmt = Fmt.for_scores(r.score for r in rows)
    files: dict[str, Path] = {}
    if inputs.plots and importlib.util.find_spec("matplotlib") is None:
        a.notes.append("plots skipped: matplotlib is not installed (pip install matplotlib)")
    elif inputs.plots:
        files["forest"] = plots.forest_plot(a, out / "plots" / "forest.png", fmt)
        curves = plots.learning_curves(rows, a.methods, out / "plots" / "learning_curves.png",
                                       fmt)
        if curves is not None:
            files["curves"] = curves
        props = plots.proportion_traces(inputs.proportions, out / "plots" / "proportions.png")
        if props is not None:
            files["proportions"] = props
    write_statistics_csv(a, out / "statistics.csv")
    (out / "report.md").write_text(render_markdown(a, inputs, fmt, files, out))
    return a
