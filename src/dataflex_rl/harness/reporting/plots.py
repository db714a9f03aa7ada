"""Plots of a comparison (matplotlib, Agg canvas; pyplot's global state is never touched).

They draw what the `Analysis` stores (harness/statistics computes every curve, band and MDE).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dataflex_rl.core.io import atomic_path
from dataflex_rl.harness.reporting.narrative import Fmt
from dataflex_rl.harness.statistics.aggregates import Profiles
from dataflex_rl.harness.statistics.analysis import BETTER, WORSE, Analysis
from dataflex_rl.harness.statistics.curves import Trace

COLORS = {BETTER: "tab:green", WORSE: "tab:red"}
#: resolution of the PNGs (report.html shows them at 96/`DPI` of their pixels: their size)
DPI = 110
#: panels per row: more wrap onto further rows (a figure stays readable at a page's width)
MAX_COLS = 3
#: line colours of methods: tab10 without its green and red, which mean better and worse
METHOD_COLORS = ("C0", "C1", "C4", "C5", "C6", "C7", "C8", "C9")


def _method_style(k: int) -> dict:
    """Colour and line style of the k-th method (a new line style every 8 methods)."""
    n = len(METHOD_COLORS)
    return {"color": METHOD_COLORS[k % n], "ls": ("-", "--", ":")[k // n % 3]}


def _figure(ncols: int, nrows: int = 1, w: float = 4.2, h: float = 3.2, margins=None):
    """A figure of ``nrows`` × ``ncols`` panels of ``w`` × ``h`` inches. ``margins`` (one
    panel): (left, right, top, bottom) in inches, a fixed layout (fast); None: matplotlib's
    constrained layout (measures every label at each draw)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = w * ncols, h * nrows
    fig = Figure(figsize=(width, height), layout=None if margins else "constrained")
    FigureCanvasAgg(fig)
    grid = {}
    if margins:
        left, right, top, bottom = margins
        grid = dict(left=left / width, right=1 - right / width)
        grid.update(top=1 - top / height, bottom=bottom / height)
    axes = fig.subplots(nrows, ncols, squeeze=False, gridspec_kw=grid)
    return fig, axes


def _panels(n: int):
    """A figure of ``n`` panels, at most `MAX_COLS` per row; returns ``(fig, [n] axes,
    columns)`` (the grid's unused cells are hidden)."""
    ncols = min(n, MAX_COLS)
    fig, grid = _figure(ncols, -(-n // ncols))
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n], ncols


def forest_plot(a: Analysis, path: str | Path, fmt: Fmt) -> Path:
    """The paired deltas of every summary on one axis: per method the delta, 95% and corrected
    intervals (coloured by verdict; none where no verdict is possible), ± the pooled MDE
    behind each block. One collection per kind of mark, so large tables draw fast."""
    summaries, methods = a.summaries, a.methods[1:]
    M = len(methods)
    rows = len(summaries) * (M + 1)  # a block: a name row, then one row per method
    names = max((len(m) for m in methods), default=4)
    left = 0.3 + 0.075 * names
    fig, axes = _figure(1, w=left + 4.6, h=0.2 * rows + 1.1, margins=(left, 0.2, 0.55, 0.55))
    ax = axes[0][0]
    ys, labels, marks, spans = [], [], [], []
    for b, s in enumerate(summaries):
        top = rows - 1 - b * (M + 1)  # the block's name row
        y = top - 1 - np.arange(M)
        ys.extend(y)
        labels.extend(methods)
        comps = s.comparisons
        blocked = [c for c in comps if not c.verdict_possible]
        name = s.name + (f"  (intervals n/a: {blocked[0].n_pairs} seeds)" if blocked else "")
        style = {"va": "center", "fontsize": 8, "fontweight": "bold"}
        ax.text(0.005, top, name, transform=ax.get_yaxis_transform(), **style)
        if math.isfinite(s.mde):
            spans.append((y[-1] - 0.45, top - 0.55, s.mde * fmt.scale))
        marks += [(y[k], c, COLORS.get(c.verdict, "0.3")) for k, c in enumerate(comps)]
    for lo, hi, mde in spans:
        ax.fill_between([-mde, mde], lo, hi, color="0.9", lw=0, zorder=0)
    ax.axvline(0, color="0.4", lw=0.8)
    bars = [(y, c, col) for y, c, col in marks if math.isfinite(c.corrected_ci[0])]
    if bars:
        yb, cb = [y for y, _, _ in bars], [col for _, _, col in bars]
        corr = np.array([c.corrected_ci for _, c, _ in bars]) * fmt.scale
        ci = np.array([c.ci for _, c, _ in bars]) * fmt.scale
        ax.hlines(yb, corr[:, 0], corr[:, 1], colors=cb, lw=3, alpha=0.5)
        ax.hlines(yb, ci[:, 0], ci[:, 1], colors=cb, lw=1)
    dots = [(y, c, col) for y, c, col in marks if math.isfinite(c.delta)]
    if dots:
        dx, dy = [c.delta * fmt.scale for _, c, _ in dots], [y for y, _, _ in dots]
        ax.scatter(dx, dy, s=16, c=[col for _, _, col in dots], zorder=3)
    if not bars:  # zero in the middle; the dots alone do not set a symmetric range
        far = max([abs(c.delta) for _, c, _ in dots] or [0.0])
        half = 1.3 * max([far] + [m / fmt.scale for _, _, m in spans]) * fmt.scale or 1.0
        ax.set_xlim(-half, half)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_ylim(-0.7, rows - 0.3)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"Δ vs {a.baseline}" + fmt.paren)
    top = 1 - 0.12 / fig.get_figheight()
    title = "paired deltas: thin = 95% bootstrap, thick = Holm-corrected"
    fig.suptitle(title + (", grey = ±MDE (simulated)" if spans else ""), fontsize=9, y=top)
    return _save(fig, path)


def learning_curves(
    a: Analysis, path: str | Path, fmt: Fmt, by_tokens: bool = False
) -> Path | None:
    """Mean score over seeds per method, one panel per benchmark plus the average; shaded ± SE
    (`Analysis.curves`; with ``by_tokens`` against generated tokens, `Analysis.token_curves`).
    Returns None without curves (final scores only)."""
    curves = a.token_curves if by_tokens else a.curves
    if not curves:
        return None
    fig, axes, ncols = _panels(len(curves))
    for i, (ax, (panel, by_method)) in enumerate(zip(axes, curves.items())):
        for k, m in enumerate(a.methods):
            if m not in by_method:
                continue
            c = by_method[m]
            mean, se = np.array(c.mean) * fmt.scale, np.array(c.se) * fmt.scale
            (line,) = ax.plot(c.steps, mean, lw=1.2, label=m, **_method_style(k))
            ax.fill_between(c.steps, mean - se, mean + se, color=line.get_color(), alpha=0.12)
        ax.set_title(panel)
        ax.set_xlabel("generated tokens (generation cost)" if by_tokens else "step")
        if i % ncols == 0:
            ax.set_ylabel("held-out score" + fmt.paren)
    axes[-1].legend(fontsize=6, frameon=False, ncol=2)
    return _save(fig, path)


def proportion_traces(traces: dict[str, dict[str, Trace]], path: str | Path) -> Path | None:
    """One panel per mixer method: per domain the target proportion (solid) and the sampled
    share (dotted), means over seeds (``traces``: `Analysis.traces`). None without traces."""
    if not traces:
        return None
    fig, axes, ncols = _panels(len(traces))
    for i, (ax, (m, by_domain)) in enumerate(zip(axes, traces.items())):
        for k, (d, tr) in enumerate(by_domain.items()):
            for ys, style in ((tr.target, "-"), (tr.actual, ":")):
                ax.plot(
                    tr.steps, ys, style, color=f"C{k}", lw=1.2, label=d if style == "-" else None
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


def performance_profiles(profiles: Profiles, path: str | Path, fmt: Fmt) -> Path:
    """One curve per method with its stratified-bootstrap band (`Analysis.profiles`)."""
    taus = profiles.taus * fmt.scale
    fig, axes = _figure(1, margins=(0.75, 0.15, 0.15, 0.55))  # fixed: one draw
    ax = axes[0][0]
    for k, (m, (curve, lo, hi)) in enumerate(profiles.curves.items()):
        (line,) = ax.plot(taus, curve, lw=1.2, label=m, **_method_style(k))
        ax.fill_between(taus, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set_xlabel("score τ" + fmt.paren)
    ax.set_ylabel("fraction of runs × benchmarks > τ")
    ax.legend(fontsize=6, frameon=False)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    """Write ``path``, a PNG at `DPI`: the figure is drawn once (report.md links it,
    report.html inlines it, trackers log it)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(p) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    return p
