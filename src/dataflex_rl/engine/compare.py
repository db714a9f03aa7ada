"""Side-by-side runs: several strategies on the same seed, one process each, and a table.

Threads do not speed up the tiny model, so strategies run in parallel processes (``spawn``).
The parent shows one progress bar fed by the runs' ``metrics.jsonl`` files.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any, Sequence

from dataflex_rl.engine.config import EngineConfig, load_config
from dataflex_rl.engine.run import METRICS_FILE, run_training, strategy_label


def _worker(args: tuple) -> dict[str, Any]:
    config_dict, strategy, seed, steps, out_dir, resume = args
    from dataflex_rl.engine.config import EngineConfig, from_dict

    config: EngineConfig = from_dict(EngineConfig, config_dict)
    return run_training(config, strategy, seed=seed, steps=steps, out_dir=out_dir,
                        resume=resume, progress=False)


def _count_steps(paths: Sequence[Path]) -> int:
    n = 0
    for p in paths:
        if p.is_file():
            n += sum(1 for line in p.read_text().splitlines() if '"kind": "train"' in line)
    return n


def compare_strategies(config: EngineConfig, strategies: Sequence[Any], *,
                       seed: int | None = None, steps: int | None = None,
                       out_root: str | Path | None = None, workers: int = 2,
                       resume: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Run every strategy with the same seed, ``workers`` processes at a time.

    Args:
        config: shared `EngineConfig` (its ``strategy`` is ignored).
        strategies: preset names, strategy YAML paths or inline specs.
        seed, steps: override the config's.
        out_root: runs go to ``out_root/<strategy>`` (default ``config.out`` or ``runs/compare``).
        workers: parallel processes (1: run in this process, one after the other).
        resume: continue each run from its checkpoint.
        progress: one progress bar over all runs.

    Returns:
        The runs' summaries, in the order of ``strategies``.
    """
    seed = config.seed if seed is None else seed
    steps = config.steps if steps is None else steps
    root = Path(out_root or config.out or "runs/compare")
    labels = [strategy_label(s) for s in strategies]
    if len(set(labels)) != len(labels):
        raise ValueError(f"strategies must have distinct names, got {labels}")
    jobs = [(config.to_dict(), s, seed, steps, str(root / lab), resume)
            for s, lab in zip(strategies, labels)]
    if workers <= 1:
        return [_worker(j) for j in jobs]
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(workers, len(jobs))) as pool:
        pending = pool.map_async(_worker, jobs)
        if progress:
            _watch(pending, [root / lab / METRICS_FILE for lab in labels], steps * len(jobs))
        return pending.get()


def _watch(pending, paths: list[Path], total: int) -> None:
    from tqdm import tqdm

    with tqdm(total=total, desc="train (all strategies)", unit="step") as bar:
        while not pending.ready():
            pending.wait(1.0)
            done = min(_count_steps(paths), total)
            bar.update(done - bar.n)


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A plain-text table: held-out accuracy per domain (greedy), mean greedy and sampled,
    their change from the start (the shared initial policy), wall time."""
    domains = sorted({k.split("/")[1] for s in summaries for k in s["final_eval"]
                      if k.endswith("/greedy") and "/mean/" not in k})
    head = ["strategy", *domains, "mean", "sampled", "Δ mean", "Δ sampled", "time"]
    rows = []
    for s in summaries:
        f, i = s["final_eval"], s["initial_eval"]
        rows.append([s["strategy"], *(f"{f.get(f'eval/{d}/greedy', float('nan')):.3f}"
                                      for d in domains),
                     f"{f.get('eval/mean/greedy', float('nan')):.3f}",
                     f"{f.get('eval/mean/sampled', float('nan')):.3f}",
                     f"{f.get('eval/mean/greedy', 0) - i.get('eval/mean/greedy', 0):+.3f}",
                     f"{f.get('eval/mean/sampled', 0) - i.get('eval/mean/sampled', 0):+.3f}",
                     f"{s['wall_seconds']:.0f}s"])
    widths = [max(len(str(r[c])) for r in [head, *rows]) for c in range(len(head))]
    fmt = lambda r: "  ".join(str(v).ljust(w) if c == 0 else str(v).rjust(w)  # noqa: E731
                              for c, (v, w) in enumerate(zip(r, widths)))
    lines = [fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]
    return "\n".join(lines)


def compare_quickstart(config_path: str | Path = "examples/quickstart.yaml", *,
                       steps: int | None = None, seed: int | None = None,
                       out_root: str | Path | None = None, workers: int = 2,
                       progress: bool = True) -> tuple[list[dict[str, Any]], str]:
    """Run the quickstart comparison (``strategies`` of the config); returns summaries, table."""
    config = load_config(config_path)
    strategies = config.strategies or [config.strategy]
    t0 = time.perf_counter()
    summaries = compare_strategies(config, strategies, seed=seed, steps=steps,
                                   out_root=out_root, workers=workers, progress=progress)
    table = format_table(summaries)
    return summaries, f"{table}\n(wall time {time.perf_counter() - t0:.0f}s)"
