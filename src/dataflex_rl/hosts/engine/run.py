"""A full engine run: the GRPO loop with evaluation, metrics files, checkpoints and plots
(``config.json``, ``metrics.jsonl``, ``checkpoints/``, ``summary.json``, ``plots/*.png``,
``dataset.json``, ``tokenizer/``, the trackers' files)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import check
from dataflex_rl.core.io import atomic_write_json
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import strategy_label
from dataflex_rl.core.texttable import text_table
from dataflex_rl.deps import plots_available
from dataflex_rl.hosts.engine.checkpoint import (
    checkpoint_dirs,
    discard_after,
    latest_step,
    load_checkpoint,
    save_checkpoint,
)
from dataflex_rl.hosts.engine.config import EngineConfig
from dataflex_rl.hosts.engine.plots import plot_run
from dataflex_rl.hosts.engine.runlog import METRICS_FILE, SUMMARY_FILE, MetricsWriter, read_metrics
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from dataflex_rl.tracking import Tracker, flatten, require_backends

#: a loaded dataset's record in the run folder: identity, `data_report`, pool sizes
DATASET_FILE = "dataset.json"


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A plain-text table of training summaries: per metric (sampled accuracy, the decision
    metric, first; then greedy), accuracy per domain, the mean and its change from the start;
    then wall time."""
    finals = [s["final_eval"] for s in summaries]
    metrics = [k for k in ("sampled", "greedy") if any(f"eval/mean/{k}" in f for f in finals)]
    metrics = metrics or ["greedy"]
    ends = ("/greedy", "/sampled")
    domains = sorted({k.split("/")[1] for f in finals for k in f if k.endswith(ends)} - {"mean"})
    groups = [("", ["strategy"])]
    for i, m in enumerate(metrics):
        label = f"{m} accuracy" + (" (decision metric)" if i == 0 and len(metrics) > 1 else "")
        groups.append((label, [*domains, "mean", "Δ mean"]))
    groups.append(("", ["time"]))
    rows = []
    for s in summaries:
        f, i = s["final_eval"], s["initial_eval"]
        cells = [s["strategy"]]
        for m in metrics:
            nan = float("nan")
            cells += [f"{f.get(f'eval/{d}/{m}', nan):.3f}" for d in domains]
            mean, start = f.get(f"eval/mean/{m}", nan), i.get(f"eval/mean/{m}", nan)
            cells += [f"{mean:.3f}", f"{mean - start:+.3f}"]
        rows.append([*cells, f"{s['wall_seconds']:.0f}s"])
    return text_table(groups, rows)


def run_training(
    config: EngineConfig,
    strategy: Any = None,
    *,
    seed: int | None = None,
    steps: int | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: bool | None = None,
    trainer: EmbeddedTrainer | None = None,
) -> dict[str, Any]:
    """Train, evaluate, checkpoint and plot one run; returns its summary (``summary.json``).

    ``strategy``, ``seed``, ``steps`` (the total), ``out_dir`` and ``progress`` override
    ``config``'s; ``resume`` continues from the newest intact checkpoint in ``out_dir`` (the
    same result as an uninterrupted run); ``trainer``: a prebuilt one (tests).
    """
    spec = config.strategy if strategy is None else strategy
    seed = config.seed if seed is None else seed
    total = config.steps if steps is None else steps
    check(EngineConfig, {"seed": seed, "steps": total}, "run_training")  # the config's ranges
    require_backends(config.tracking, "an engine run")  # before any work
    out = Path(out_dir or config.out or f"runs/{strategy_label(spec)}-s{seed}")
    if resume and not checkpoint_dirs(out):
        warnings.warn(
            f"{out}: --resume found no checkpoint (the run stopped before its first "
            "one, or never started); starting from step 0",
            UserWarning,
            stacklevel=2,
        )
        (out / METRICS_FILE).unlink(missing_ok=True)
        resume = False
    if not resume and (out / METRICS_FILE).exists():
        raise ConfigError(
            f"{out}: a run already exists here; use --resume to continue it or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    plots = config.log.plots and plots_available(
        "engine run plots", say=lambda m: warnings.warn(m, stacklevel=3)
    )  # decided up front
    writer = MetricsWriter(out)
    tr = trainer or EmbeddedTrainer(config, spec, seed=seed, out_dir=out)
    history: list[dict] = []
    logged: dict[str, int] = {}
    if resume:
        state = load_checkpoint(out)
        if total < state["step"]:
            raise ConfigError(
                f"--steps {total}: below the checkpoint's step {state['step']} in {out}; "
                f"a run cannot go back (ask for {state['step']} or more steps, or start "
                "another --out)"
            )
        tr.load_state_dict(state)
        discard_after(out, tr.step)
        history, dropped = writer.truncate(tr.step)
        for r in history + dropped:
            logged[r["kind"]] = max(r["step"], logged.get(r["kind"], r["step"]))
    run_config = {
        **config.to_dict(),
        "strategy": tr.driver.strategy.spec.to_dict(),
        "seed": seed,
        "steps": total,
    }
    atomic_write_json(out / "config.json", run_config)
    if tr.data_report is not None:  # and a character tokenizer's vocabulary
        record = {"identity": tr.dataset, **tr.data_report, "sizes": tr.taskset.summary()}
        atomic_write_json(out / DATASET_FILE, record)
        if hasattr(tr.policy.tokenizer, "chars"):
            tr.policy.tokenizer.save(out / "tokenizer")
    with Tracker.start(
        config.tracking,
        out,
        params=flatten({k: v for k, v in run_config.items() if k != "tracking"}),
        tags={"strategy": strategy_label(spec), "seed": str(seed)},
        first_step=tr.step,
        history=history,
        logged=logged,
    ) as tracker:  # closed as failed if the run raises
        writer.tracker = tracker
        evals = [r for r in read_metrics(out) if r["kind"] == "eval"] if resume else []
        if not evals:
            evals.append(_evaluate(tr, writer))
        step_times = _loop(tr, writer, total, evals, progress, out)
        if not evals or evals[-1]["step"] != tr.step:
            evals.append(_evaluate(tr, writer))
        tr.driver.close()
        if latest_step(out) != tr.step:
            save_checkpoint(out, tr.state_dict())
        summary = {
            "strategy": strategy_label(spec),
            "spec": tr.driver.strategy.spec.to_dict(),
            "seed": seed,
            "steps": tr.step,
            "out_dir": str(out),
            "parameter_sha256": tr.parameter_hash(),
            "initial_eval": _strip(evals[0]),
            "final_eval": _strip(evals[-1]),
            "mean_step_seconds": sum(step_times) / len(step_times) if step_times else None,
            "wall_seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        }
        atomic_write_json(out / SUMMARY_FILE, summary)
        plot_files = plot_run(out) if plots else []
        tracker.log_files(images=plot_files, files=[out / SUMMARY_FILE])
    return summary


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k.startswith("eval/")}


def _evaluate(tr: EmbeddedTrainer, writer: MetricsWriter) -> dict:
    t = time.perf_counter()
    metrics = tr.evaluate()
    metrics["engine/generation_cost_tokens_at_eval"] = tr.cost_tokens
    metrics["time/eval_s"] = time.perf_counter() - t
    writer.write("eval", tr.step, metrics)
    return {"kind": "eval", "step": tr.step, **metrics}


def _loop(
    tr: EmbeddedTrainer, writer: MetricsWriter, total: int, evals: list, progress, out: Path
) -> list[float]:
    cfg = tr.config
    show = cfg.log.progress if progress is None else progress
    bar = None
    if show and tr.step < total:
        from tqdm import tqdm

        bar = tqdm(
            total=total, initial=tr.step, desc=f"train {tr.driver.strategy.spec.name}", unit="step"
        )
    times = []
    budget = cfg.generated_tokens
    while tr.step < total and (budget is None or tr.cost_tokens < budget):
        metrics = tr.train_step()
        times.append(metrics["time/step_s"])
        writer.write("train", metrics.pop("step"), metrics)
        if cfg.eval.every and tr.step % cfg.eval.every == 0 and tr.step < total:
            evals.append(_evaluate(tr, writer))
        if cfg.log.checkpoint_every and tr.step % cfg.log.checkpoint_every == 0:
            save_checkpoint(out, tr.state_dict())  # the decision log is flushed first
        if bar is not None:
            bar.update(1)
            last = evals[-1]  # the decision metric (sampled) when measured, else greedy
            kind = "sampled" if "eval/mean/sampled" in last else "greedy"
            bar.set_postfix(
                {
                    "reward": f"{metrics.get('train/reward', 0.0):.2f}",
                    kind: f"{last.get(f'eval/mean/{kind}', 0.0):.2f}",
                }
            )
    if bar is not None:
        bar.close()
    return times
