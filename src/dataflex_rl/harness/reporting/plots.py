"""Plots of a comparison (matplotlib, Agg canvas; pyplot's global state is never touched).

- `forest_plot`: paired deltas against the baseline, 95% and corrected intervals, ±MDE band
  (the simulated MDE of the verdict rule).
- `performance_profiles`: fraction of run × benchmark scores above each threshold, 95%
  stratified-bootstrap bands.
- `learning_curves`: mean held-out score over seeds per method and checkpoint (± SE).
- `proportion_traces`: mixers' target and sampled domain proportions per step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from dataflex_rl.core.io import atomic_path
from dataflex_rl.harness.reporting.narrative import Fmt, family_mde
from dataflex_rl.harness.statistics import aggregates
from dataflex_rl.harness.statistics.analysis import BETTER, WORSE, Analysis
from dataflex_rl.harness.statistics.results import Row

COLORS = {BETTER: "tab:green", WORSE: "tab:red"}
#: panels per row: more wrap onto further rows (a figure stays readable at a page's width)
MAX_COLS = 3
#: line colours of methods: tab10 without its green and red, which mean better and worse
METHOD_COLORS = ("C0", "C1", "C4", "C5", "C6", "C7", "C8", "C9")


def _method_style(k: int) -> dict:
    """Colour and line style of the k-th method (a new line style every 8 methods)."""
    n = len(METHOD_COLORS)
    return {"color": METHOD_COLORS[k % n], "ls": ("-", "--", ":")[k // n % 3]}


def _figure(ncols: int, nrows: int = 1, w: float = 4.2, h: float = 3.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w * ncols, h * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _panels(n: int, w: float = 4.2, h: float = 3.2):
    """A figure of ``n`` panels, at most `MAX_COLS` per row; returns ``(fig, [n] axes,
    columns)`` (the grid's unused cells are hidden)."""
    ncols = min(n, MAX_COLS)
    fig, grid = _figure(ncols, -(-n // ncols), w=w, h=h)
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n], ncols


def forest_plot(a: Analysis, path: str | Path, fmt: Fmt) -> Path:
    """One panel per summary; a row per method: delta (dot), 95% interval (thin), corrected
    interval (thick, coloured by verdict); the grey band is ± the pooled MDE. Where the seed
    count allows no verdict there is no bar, only the dot and "n/a (N seeds)"."""
    summaries = a.summaries
    methods = a.methods[1:]
    fig, axes, ncols = _panels(len(summaries), h=0.35 * len(methods) + 1.4, w=3.6)
    y = np.arange(len(methods))[::-1]
    for i, (ax, s) in enumerate(zip(axes, summaries)):
        mde = family_mde(a, s)
        if math.isfinite(mde):
            ax.axvspan(
                -mde * fmt.scale,
                mde * fmt.scale,
                color="0.9",
                zorder=0,
                label=f"±MDE ({s.pair_counts()[0]} paired seeds, simulated)",
            )
        ax.axvline(0, color="0.4", lw=0.8)
        for yi, c in zip(y, s.comparisons):
            color = COLORS.get(c.verdict, "0.3")
            if math.isfinite(c.corrected_ci[0]):
                ax.plot(
                    np.array(c.corrected_ci) * fmt.scale,
                    [yi, yi],
                    color=color,
                    lw=3,
                    alpha=0.5,
                    solid_capstyle="butt",
                )
                ax.plot(np.array(c.ci) * fmt.scale, [yi, yi], color=color, lw=1)
            if math.isfinite(c.delta):
                ax.plot([c.delta * fmt.scale], [yi], "o", color=color, ms=4)
            if not c.verdict_possible:  # no bar: no interval where no verdict is possible
                ax.annotate(
                    f"interval n/a ({c.n_pairs} seeds)",
                    (0.02, yi),
                    xycoords=ax.get_yaxis_transform(),  # x in axes fraction, y in data
                    xytext=(0, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color="0.3",
                )
        if not any(c.verdict_possible for c in s.comparisons):
            far = max([abs(c.delta) for c in s.comparisons if math.isfinite(c.delta)] or [0.0])
            half = 1.3 * far * fmt.scale or 1.0
            ax.set_xlim(-half, half)  # zero in the middle; the dots alone do not set the range
        ax.set_yticks(y, methods if i % ncols == 0 else [""] * len(methods))
        ax.set_title(s.name)
        ax.set_xlabel(f"Δ vs {a.baseline}" + (f" ({fmt.unit})" if fmt.unit else ""))
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(loc="lower left", fontsize=7, frameon=False)
    fig.suptitle("paired deltas: thin = 95% bootstrap, thick = Holm-corrected", fontsize=9)
    return _save(fig, path)


def learning_curves(rows: list[Row], methods: list[str], path: str | Path, fmt: Fmt) -> Path | None:
    """Mean score over seeds per method, one panel per benchmark plus the average; shaded ± SE.

    Returns None when the rows carry no steps (final scores only).
    """
    rows = [r for r in rows if r.step is not None]
    if not rows:
        return None
    benchmarks = list(dict.fromkeys(r.benchmark for r in rows))
    # (panel, method, step) -> {seed: score}; the average is over benchmarks per run and step
    cells: dict[tuple, dict] = defaultdict(dict)
    per_run: dict[tuple, list] = defaultdict(list)
    for r in rows:
        cells[(r.benchmark, r.method, r.step)][r.seed] = r.score
        per_run[(r.method, r.step, r.seed)].append(r.score)
    panels = benchmarks + (["average"] if len(benchmarks) > 1 else [])
    for (m, step, seed), v in per_run.items():
        if len(v) == len(benchmarks):
            cells[("average", m, step)][seed] = float(np.mean(v))
    fig, axes, ncols = _panels(len(panels))
    for i, (ax, panel) in enumerate(zip(axes, panels)):
        for k, m in enumerate(methods):
            steps = sorted(st for (p, mm, st) in cells if p == panel and mm == m)
            if not steps:
                continue
            vals = [np.array(list(cells[(panel, m, st)].values())) for st in steps]
            mean = np.array([v.mean() for v in vals]) * fmt.scale
            se = (
                np.array([v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else 0.0 for v in vals])
                * fmt.scale
            )
            (line,) = ax.plot(steps, mean, lw=1.2, label=m, **_method_style(k))
            ax.fill_between(steps, mean - se, mean + se, color=line.get_color(), alpha=0.12)
        ax.set_title(panel)
        ax.set_xlabel("step")
        if i % ncols == 0:
            ax.set_ylabel("held-out score" + (f" ({fmt.unit})" if fmt.unit else ""))
    axes[-1].legend(fontsize=6, frameon=False, ncol=2)
    return _save(fig, path)


def proportion_traces(rows: list[dict], path: str | Path) -> Path | None:
    """One panel per mixer method: per domain the target proportion (solid) and the sampled
    share (dotted), means over seeds. Returns None without rows."""
    if not rows:
        return None
    methods = list(dict.fromkeys(r["method"] for r in rows))
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    fig, axes, ncols = _panels(len(methods))
    for i, (ax, m) in enumerate(zip(axes, methods)):
        for k, d in enumerate(domains):
            sel = [r for r in rows if r["method"] == m and r["domain"] == d]
            steps = sorted({r["step"] for r in sel})
            for col, style in (("target", "-"), ("actual", ":")):
                by_step = defaultdict(list)
                for r in sel:
                    by_step[r["step"]].append(r[col])
                ys = [
                    np.nanmean(by_step[s]) if np.isfinite(by_step[s]).any() else np.nan
                    for s in steps
                ]
                ax.plot(
                    steps, ys, style, color=f"C{k}", lw=1.2, label=d if col == "target" else None
                )
        ax.set_title(m)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        if i % ncols == 0:
            ax.set_ylabel("domain proportion")
    fig.suptitle(
        "mixers' domain proportions, mean over seeds:\ntarget (solid), sampled share (dotted)",
        fontsize=9,
    )
    axes[0].legend(fontsize=7, frameon=False)
    return _save(fig, path)


def performance_profiles(
    scores: dict[str, np.ndarray], path: str | Path, fmt: Fmt, n_boot: int = 1000
) -> Path:
    """One curve per method (``scores``: method -> [R, T]) with its stratified-bootstrap band."""
    allv = np.concatenate([x.ravel() for x in scores.values()])
    taus = np.linspace(allv.min(), allv.max(), 41)
    rng = np.random.default_rng(0)
    fig, axes = _figure(1)
    ax = axes[0][0]
    for k, (m, x) in enumerate(scores.items()):
        band = aggregates.performance_profile(aggregates.stratified_resamples(x, rng, n_boot), taus)
        lo, hi = np.quantile(band, [0.025, 0.975], axis=0)
        (line,) = ax.plot(
            taus * fmt.scale,
            aggregates.performance_profile(x, taus),
            lw=1.2,
            label=m,
            **_method_style(k),
        )
        ax.fill_between(taus * fmt.scale, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set_xlabel("score τ" + (f" ({fmt.unit})" if fmt.unit else ""))
    ax.set_ylabel("fraction of runs × benchmarks > τ")
    ax.legend(fontsize=6, frameon=False)
    return _save(fig, path)


def _save(fig, path: str | Path, svg: bool = True) -> Path:
    """Write ``path`` (PNG) and, with ``svg``, the same figure as SVG beside it (report.html
    inlines it)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(p) as tmp:
        fig.savefig(tmp, dpi=110, format=p.suffix.lstrip(".") or "png")
    if svg:
        with atomic_path(p.with_suffix(".svg")) as tmp:
            fig.savefig(tmp, format="svg", metadata={"Date": None})
    return p
