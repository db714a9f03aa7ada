"""PNG plots of an engine run from its ``metrics.jsonl``: ``accuracy.png``, ``domains.png``,
``kept.png``, ``weights.png``; drawn on their own Agg canvas (no pyplot global state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataflex_rl.core.io import atomic_path
from dataflex_rl.core.metrics import domain_metric, split_domain_metric
from dataflex_rl.hosts.engine.runlog import read_metrics

PLOTS_DIR = "plots"


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in records if key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def _axes():
    """A fresh 6x4 in figure on its own Agg canvas, and its one axis."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format=Path(path).suffix.lstrip(".") or "png")
    return path


def plot_run(out_dir: str | Path) -> list[Path]:
    """Write the run's plots under ``out_dir/plots`` (all four always: a note where nothing
    was logged); returns their paths."""
    out = Path(out_dir) / PLOTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    records = read_metrics(out_dir)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    domains = sorted(
        {k.split("/")[1] for r in evals for k in r if k.startswith("eval/")} - {"mean"}
    )
    paths = []

    fig, ax = _axes()
    for i, d in enumerate(domains):
        color = f"C{i}"
        for kind, style in (("greedy", "-"), ("sampled", "--")):
            x, y = _series(evals, f"eval/{d}/{kind}")
            if x:
                ax.plot(x, y, style, color=color, marker="o", ms=3, label=f"{d} {kind}")
    ax.set(xlabel="step", ylabel="held-out accuracy", title="accuracy per domain", ylim=(0, 1))
    ax.legend(fontsize=7, ncol=2)
    paths.append(_save(fig, out / "accuracy.png"))

    fig, ax = _axes()
    mix = [split_domain_metric(k, "mix") for r in train for k in r]
    names = sorted({m[0] for m in mix if m and m[1] == "actual"})
    for i, d in enumerate(names):
        for key, style in (("target", "--"), ("actual", "-")):
            x, y = _series(train, domain_metric("mix", d, key))
            ax.plot(x, y, style, color=f"C{i}", label=f"{d} {key}")
    ax.set(
        xlabel="step",
        ylabel="proportion",
        title="domain proportions: target vs actual",
        ylim=(0, 1),
    )
    ax.legend(fontsize=7, ncol=2)
    paths.append(_save(fig, out / "domains.png"))

    kept = [
        ("dataflex/kept_response_fraction", "responses"),
        ("dataflex/kept_group_fraction", "groups"),
        ("dataflex/kept_token_fraction", "tokens"),
        ("dataflex/zero_advantage_group_fraction", "zero-advantage groups"),
    ]
    weights = [
        ("dataflex/weight_mean", "mean"),
        ("dataflex/weight_std", "std"),
        ("dataflex/weight_min", "min"),
        ("dataflex/weight_max", "max"),
        ("dataflex/weight_ess_fraction", "ESS fraction"),
    ]
    paths.append(_lines(train, out / "kept.png", "kept fractions", kept))
    paths.append(_lines(train, out / "weights.png", "response weights", weights))
    return paths


def _lines(records: list[dict], path: Path, title: str, keys: list[tuple[str, str]]) -> Path:
    fig, ax = _axes()
    drawn = 0
    for key, label in keys:
        x, y = _series(records, key)
        if x:
            ax.plot(x, y, label=label)
            drawn += 1
    if drawn:
        ax.legend(fontsize=7)
    else:
        ax.text(
            0.5, 0.5, "not logged in this run", ha="center", va="center", transform=ax.transAxes
        )
    ax.set(xlabel="step", title=title)
    return _save(fig, path)
