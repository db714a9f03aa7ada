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
    """A figure of ``nrows`` × ``ncols`` panels of ``w`` × ``h`` inches. ``margins``: (left,
    right, top, bottom, between columns, between rows) in inches, a fixed layout (fast);
    None: matplotlib's constrained layout (measures every label at each draw)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = w * ncols, h * nrows
    fig = Figure(figsize=(width, height), layout=None if margins else "constrained")
    FigureCanvasAgg(fig)
    grid = {}
    if margins:
        left, right, top, bottom, wgap, hgap = margins
        cell_w = (width - left - right - wgap * (ncols - 1)) / ncols
        cell_h = (height - top - bottom - hgap * (nrows - 1)) / nrows
        grid = dict(left=left / width, right=1 - right / width, wspace=wgap / cell_w)
        grid.update(top=1 - top / height, bottom=bottom / height, hspace=hgap / cell_h)
    axes = fig.subplots(nrows, ncols, squeeze=False, gridspec_kw=grid)
    return fig, axes


def _panels(n: int, w: float = 4.2, h: float = 3.2, margins=None):
    """A figure of ``n`` panels, at most `MAX_COLS` per row; returns ``(fig, [n] axes,
    columns)`` (the grid's unused cells are hidden; ``margins``: `_figure`)."""
    ncols = min(n, MAX_COLS)
    fig, grid = _figure(ncols, -(-n // ncols), w=w, h=h, margins=margins)
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n], ncols


def forest_plot(a: Analysis, path: str | Path, fmt: Fmt) -> Path:
    """One panel per summary; a row per method: delta (dot), 95% interval (thin), corrected
    interval (thick, coloured by verdict); the grey band is ± the pooled MDE. Where the seed
    count allows no verdict there is no bar, only the dot and "n/a (N seeds)". Each panel's
    bars and dots are one collection each (few artists: a 16-panel figure draws in a fraction
    of a second)."""
    summaries = a.summaries
    methods = a.methods[1:]
    # a fixed layout: room for the method names on the left, titles and axis labels
    names = max((len(m) for m in methods), default=4)
    margins = (0.25 + 0.085 * names, 0.15, 0.7, 0.5, 0.25, 0.75)
    fig, axes, ncols = _panels(len(summaries), h=0.35 * len(methods) + 1.4, w=3.6, margins=margins)
    y = np.arange(len(methods))[::-1]
    for i, (ax, s) in enumerate(zip(axes, summaries)):
        mde = s.mde
        if math.isfinite(mde):
            label = f"±MDE ({s.pair_counts()[0]} paired seeds, simulated)"
            ax.axvspan(-mde * fmt.scale, mde * fmt.scale, color="0.9", zorder=0, label=label)
        ax.axvline(0, color="0.4", lw=0.8)
        comps = s.comparisons
        colors = [COLORS.get(c.verdict, "0.3") for c in comps]
        bars = [k for k, c in enumerate(comps) if math.isfinite(c.corrected_ci[0])]
        if bars:
            lo = np.array([comps[k].corrected_ci for k in bars]) * fmt.scale
            ci = np.array([comps[k].ci for k in bars]) * fmt.scale
            yb, cb = y[bars], [colors[k] for k in bars]
            ax.hlines(yb, lo[:, 0], lo[:, 1], colors=cb, lw=3, alpha=0.5)
            ax.hlines(yb, ci[:, 0], ci[:, 1], colors=cb, lw=1)
        dots = [k for k, c in enumerate(comps) if math.isfinite(c.delta)]
        if dots:
            x = [comps[k].delta * fmt.scale for k in dots]
            ax.scatter(x, y[dots], s=16, c=[colors[k] for k in dots], zorder=3)
        blocked = [k for k, c in enumerate(comps) if not c.verdict_possible]
        if blocked:  # no bar: no interval where no verdict is possible
            n = comps[blocked[0]].n_pairs
            note = f"intervals n/a ({n} seeds)"
            ax.text(0.02, 0.98, note, transform=ax.transAxes, va="top", fontsize=7, color="0.3")
        if not any(c.verdict_possible for c in comps):
            far = max([abs(c.delta) for c in comps if math.isfinite(c.delta)] or [0.0])
            half = 1.3 * far * fmt.scale or 1.0
            ax.set_xlim(-half, half)  # zero in the middle; the dots alone do not set the range
        ax.set_yticks(y, methods)
        ax.tick_params(axis="y", labelleft=i % ncols == 0)  # names once per row
        ax.set_ylim(-0.7, len(methods) - 0.3)
        ax.set_title(s.name)
        if i + ncols >= len(summaries):  # once per column, under its last panel
            ax.set_xlabel(f"Δ vs {a.baseline}" + fmt.paren)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(loc="lower left", fontsize=7, frameon=False)
    top = 1 - 0.12 / fig.get_figheight()
    fig.suptitle("paired deltas: thin = 95% bootstrap, thick = Holm-corrected", fontsize=9, y=top)
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
    fig, axes = _figure(1, margins=(0.75, 0.15, 0.15, 0.55, 0.0, 0.0))  # fixed: one draw
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
