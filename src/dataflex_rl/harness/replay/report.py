"""``replay.md``, ``replay_steps.csv``, ``replay_summary.json`` and plots of a `ReplayResult`.

The report is a `document.Document` (`replay_document`) with the same tables, renderers and
terminal view as ``compare``'s and ``report``'s."""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

from dataflex_rl.core.io import atomic_path, atomic_write_json, atomic_write_text
from dataflex_rl.harness.replay.replay import ReplayResult, nanmean
from dataflex_rl.harness.reporting.document import (
    Document,
    Figure,
    Items,
    Paragraph,
    Section,
    Table,
    markdown,
)

FRAMING = (
    "Replay is counterfactual on fixed rollouts: each strategy decides on the rollouts "
    "the logged run produced. Had it been run, the policy -- and so the rollouts -- "
    'would have changed too. Read it as "what would it keep, weight and ask for" and '
    '"how much generation would it skip", not as "would it train better" (for that, '
    "`dataflex-rl compare`)."
)


def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


#: what the overall table's columns mean (under it)
COLUMNS = (
    "retention: kept / active responses over all steps; weight ESS: "
    "(Σw)²/Σw² over active responses, as a fraction of them (mean over steps); skip "
    "rate: share of the step's prompts the pre-rollout policy would not generate, and "
    "the tokens of their responses (share of all generated tokens); vs logged: the "
    "decision the run applied (Jaccard of kept sets, Pearson correlation of weights; "
    "— where one side is constant); identical to logged: for the run's own "
    "strategy, the steps whose keep mask, weights, recomputed advantages and mixer "
    "update are bit-identical to the logged ones (all of them unless a signal is "
    "only approximate, see below); target: mean over steps of the domain "
    "proportions the strategy asks for (— without mix)."
)


def overall_table(res: ReplayResult) -> Table:
    """One row per replayed strategy: retention, weight ESS, skip rate, tokens saved,
    agreement with the logged decision, exact steps, the domain proportions asked for."""
    domains = res.log.domains
    header = ("strategy", "retention", "weight ESS", "skip rate", "tokens saved")
    header += ("Jaccard vs logged", "weight corr vs logged", "identical to logged")
    header += tuple(f"target {d}" for d in domains)
    rows = []
    for lb in res.strategies:
        o = res.overall[lb]
        exact = "—" if o["exact_steps"] is None else f"{o['exact_steps']}/{o['steps']}"
        saved = f"{o['tokens_saved']} ({_f(100 * o['tokens_saved_fraction'], 1)}%)"
        figures = [o[k] for k in ("retention", "ess_fraction", "skip_rate")]
        agree = [o["jaccard_logged"], o["weight_corr_logged"]]
        targets = [o[f"target_{d}"] for d in domains]
        rows.append((lb, *map(_f, figures), saved, *map(_f, agree), exact, *map(_f, targets)))
    return Table(header, tuple(rows), (False, *(True,) * (len(header) - 1)))


def pairwise_table(res: ReplayResult) -> Table:
    """Mean over steps of the Jaccard of kept sets and the weight correlation, per pair."""
    rows = []
    for a, b in dict.fromkeys((p["a"], p["b"]) for p in res.pairwise):
        sel = [p for p in res.pairwise if p["a"] == a and p["b"] == b]
        jac, corr = nanmean(p["jaccard"] for p in sel), nanmean(p["weight_corr"] for p in sel)
        rows.append((a, b, _f(jac), _f(corr)))
    header = ("strategy A", "strategy B", "Jaccard of kept sets", "weight correlation")
    return Table(header, tuple(rows), (False, False, True, True))


def replay_document(res: ReplayResult, plot_files: dict[str, Path], out: Path) -> Document:
    """The replay's report (``replay.md``; the terminal shows its ``overall`` section)."""
    log = res.log
    lead = (
        f"Log: `{log.folder}` ({log.host} host), {log.num_steps} steps, {int(log.bounds[-1])} "
        f"responses, domains {', '.join(log.domains)}; the run's strategy: "
        f"**{log.strategy.get('name', '?')}**. {FRAMING} Replayed {len(res.strategies)} "
        f"strategies in {res.seconds:.2f} s ({res.steps_per_second:.0f} logged steps/s, all "
        "strategies together)."
    )
    secs = [Section("overall", "Overall", (overall_table(res), Paragraph(COLUMNS)))]
    if res.pairwise:
        secs.append(
            Section("pairwise", "Pairwise agreement (mean over steps)", (pairwise_table(res),))
        )
    notes = tuple(f"**{lb}**: {n}" for lb in res.strategies for n in res.notes[lb])
    if notes:
        secs.append(
            Section("approximate", "Signals the log holds only approximately", (Items(notes),))
        )
    if plot_files:
        figs = tuple(Figure(p, k, k) for k, p in plot_files.items())
        secs.append(Section("plots", "Plots", figs))
    files = (
        "Per-step figures: `replay_steps.csv` (one row per strategy and step) and "
        "`replay_pairwise.csv`; overall: `replay_summary.json`."
    )
    secs.append(Section("files", "Files", (Paragraph(files),)))
    return Document("Replay of a decision log", lead, tuple(secs), out)


def _write_csv(rows: list[dict], path: Path) -> Path:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return path


def write_replay_report(
    res: ReplayResult, out_dir: str | Path, plots: bool = True
) -> dict[str, Path]:
    """Write the report files under ``out_dir``; returns name -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "steps_csv": _write_csv(res.rows, out / "replay_steps.csv"),
        "pairwise_csv": _write_csv(res.pairwise, out / "replay_pairwise.csv"),
    }
    summary = {
        "log": str(res.log.folder),
        "host": res.log.host,
        "steps": res.log.num_steps,
        "logged_strategy": res.log.strategy,
        "seconds": res.seconds,
        "steps_per_second": res.steps_per_second,
        "overall": res.overall,
        "notes": res.notes,
    }
    files["summary"] = out / "replay_summary.json"
    atomic_write_json(files["summary"], summary)
    plot_files: dict[str, Path] = {}
    if plots and importlib.util.find_spec("matplotlib") is not None:
        plot_files["replay"] = replay_plot(res, out / "plots" / "replay.png")
        props = proportions_plot(res, out / "plots" / "replay_proportions.png")
        if props is not None:
            plot_files["proportions"] = props
    files.update(plot_files)
    files["report"] = out / "replay.md"
    atomic_write_text(files["report"], markdown(replay_document(res, plot_files, out)))
    return files


def replay_plot(res: ReplayResult, path: Path) -> Path:
    """Four panels per step: retention, weight ESS, Jaccard vs logged, tokens saved."""
    from dataflex_rl.harness.reporting.plots import _figure, _method_style, _save

    panels = (
        ("retention", "retention (kept / active)"),
        ("ess_fraction", "weight ESS / active"),
        ("jaccard_logged", "Jaccard vs logged kept set"),
        ("tokens_saved", "tokens not generated (pre-rollout)"),
    )
    fig, axes = _figure(len(panels), w=3.4, h=2.8)
    for ax, (key, title) in zip(axes[0], panels):
        for k, lb in enumerate(res.strategies):
            sel = [r for r in res.rows if r["strategy"] == lb]
            steps, values = [r["step"] for r in sel], [r[key] for r in sel]
            ax.plot(steps, values, lw=1.1, label=lb, **_method_style(k))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7, frameon=False)
    return _save(fig, path)


def proportions_plot(res: ReplayResult, path: Path) -> Path | None:
    """Per mixing strategy: the domain proportions it asks for per step (None without one)."""
    from dataflex_rl.harness.reporting.plots import _figure, _save

    domains = res.log.domains
    mixers = [
        lb
        for lb in res.strategies
        if any(math.isfinite(r[f"target_{domains[0]}"]) for r in res.rows if r["strategy"] == lb)
    ]
    if not mixers:
        return None
    fig, axes = _figure(len(mixers), w=3.4, h=2.8)
    for ax, lb in zip(axes[0], mixers):
        sel = [r for r in res.rows if r["strategy"] == lb]
        steps = [r["step"] for r in sel]
        for k, d in enumerate(domains):
            ax.plot(steps, [r[f"target_{d}"] for r in sel], color=f"C{k}", lw=1.2, label=d)
        ax.set_title(f"{lb}: proportions asked for", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=7, frameon=False)
    return _save(fig, path)
