"""Optimizer noise: what GRPO's optimizer does to the warm start, against noise and supervision.

The engine's default optimizer is plain SGD (lr 0.02) on the gradient clipped to norm 1, because
with the tiny (~0.9M-parameter) policy AdamW (lr 1e-4) lets gradient noise erode what the
supervised warm start taught. This benchmark measures that claim, on the engine's default
policy and tasks, from one seed, in parallel processes:

1. GRPO, ``--steps`` steps (16 prompts x 8 samples) from the warm start, under the default
   optimizer, AdamW at lr 1e-4 and at 2e-5, and the default optimizer on rewards shuffled
   across the batch (pure noise: the expected policy gradient is zero, so any change is what
   the optimizer makes of noise).
2. Supervised continuation: the warm start's own loss (`warm_start`, constant lr) for
   ``--steps`` steps with a fresh AdamW at lr 1e-4, batch 16 against batch 64, on the GRPO
   training pools. Correct targets with a noisy (small-batch) gradient separate "noise per
   step" from anything specific to RL.

Each variant reports the change of held-out greedy and sampled accuracy per domain
(``EmbeddedTrainer.evaluate``, percentage points; every variant starts from the same policy and is
measured with the same seeded instrument), the mean train reward (GRPO) or loss (supervised)
over the first and last 20 steps, and the CPU-seconds of its training steps (evaluation
excluded). Ratios are against the default GRPO variant of the same run.

    .venv/bin/python benchmarks/optimizer_noise.py [--steps 100] [--seed 0] [--workers 2]
        [--policy tiny]

About 6 CPU-minutes at the defaults (a little over 3 minutes of wall time with 2 workers on
2 idle cores): ~0.7 CPU-s per GRPO step, ~0.1-0.25 per supervised step, ~35 CPU-s for the 7
held-out evaluations and start-up. A 3-step trial takes under a CPU-minute.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from typing import Any

import torch

from dataflex_rl.hosts.engine.config import EngineConfig, load_config
from dataflex_rl.hosts.engine.noise import derive_seed
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

#: GRPO variants: name -> (``optim`` overrides, rewards shuffled across the batch)
GRPO_VARIANTS: dict[str, tuple[dict[str, Any], bool]] = {
    "default": ({}, False),
    "adamw 1e-4": ({"name": "adamw", "lr": 1e-4}, False),
    "adamw 2e-5": ({"name": "adamw", "lr": 2e-5}, False),
    "default, shuffled rewards": ({}, True),
}
#: supervised continuation: name -> batch size (fresh AdamW at `SFT_LR`, constant)
SFT_VARIANTS: dict[str, int] = {"sft batch 16": 16, "sft batch 64": 64}
SFT_LR = 1e-4
#: steps averaged for the first and last train reward (or loss); half the steps when fewer
WINDOW = 20
#: a default's Δ accuracy below this (pp) gives no ratio (one problem of 200 is 0.5 pp)
MIN_REFERENCE_PP = 0.5


class ShuffledRewardTrainer(EmbeddedTrainer):
    """GRPO on rewards permuted across the whole batch (a seeded permutation per step).

    The permutation keeps the batch's rewards (and their mean, ``train/reward``) but cuts each
    one's tie to its response, so the advantages are independent of the responses and the
    expected policy gradient is zero: the update is the optimizer's response to noise alone.
    """

    def __init__(self, config: EngineConfig, *, seed: int) -> None:
        super().__init__(config, seed=seed)
        self.gen_shuffle = torch.Generator().manual_seed(derive_seed(self.seed, "shuffle"))

    def _rollout(self, problems: list, step: int):
        rollout, rewards, t_gen, t_rew = super()._rollout(problems, step)
        perm = torch.randperm(len(rewards), generator=self.gen_shuffle)
        return rollout, rewards[perm], t_gen, t_rew


def _config(policy: str | None, optim: dict[str, Any] | None = None) -> EngineConfig:
    data: dict[str, Any] = {"optim": optim or {}}
    if policy is not None:
        data["policy"] = policy
    return load_config(data)


def _window(steps: int) -> int:
    return max(1, min(WINDOW, steps // 2))


def _window_means(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    w = _window(len(values))
    return statistics.mean(values[:w]), statistics.mean(values[-w:])


def _run(job: tuple) -> dict[str, Any]:
    """One variant in its own process: ``("start" | "grpo" | "sft", name, steps, seed, policy)``.

    Returns the held-out metrics (``eval``), and for a training variant the first and last
    window means of its reward or loss (``first``, ``last``) and its training CPU-seconds.
    """
    kind, name, steps, seed, policy = job
    t_job = time.process_time()
    if kind == "grpo":
        optim, shuffle = GRPO_VARIANTS[name]
        cls = ShuffledRewardTrainer if shuffle else EmbeddedTrainer
        trainer = cls(_config(policy, optim), seed=seed)
        t0 = time.process_time()
        rewards = [trainer.train_step()["train/reward"] for _ in range(steps)]
        cpu_s, series = time.process_time() - t0, rewards
    elif kind == "sft":
        from dataflex_rl.hosts.engine.warmstart import warm_start

        # the trainer only provides the policy, the task set and the held-out instrument
        trainer = EmbeddedTrainer(_config(policy), seed=seed)
        # the supervised target: every training-pool problem, domain by domain
        pools = [trainer.taskset.train[d] for d in trainer.taskset.domains]
        prompts = [p.prompt for pool in pools for p in pool]
        answers = [p.answer for pool in pools for p in pool]
        groups = [i for i, pool in enumerate(pools) for _ in pool]
        t0 = time.process_time()
        series = warm_start(
            trainer.policy,
            prompts,
            answers,
            steps=steps,
            batch_size=SFT_VARIANTS[name],
            lr=SFT_LR,
            weight_decay=0.0,
            seed=seed,
            groups=groups,
            schedule=lambda step: 1.0,
        )
        cpu_s = time.process_time() - t0
    else:
        trainer, series, cpu_s = EmbeddedTrainer(_config(policy), seed=seed), [], 0.0
    first, last = _window_means(series)
    out = {"eval": trainer.evaluate(), "first": first, "last": last, "cpu_s": cpu_s}
    out["job_cpu_s"] = time.process_time() - t_job
    return out


def _ratio(x: float, ref: float, floor: float = 1e-12) -> str:
    return f"{x / ref:.2f}" if abs(ref) >= floor else "n/a"


def print_table(
    title: str,
    series_name: str,
    rows: dict[str, dict],
    start: dict[str, float],
    reference: dict,
    domains: list[str],
) -> None:
    """Δ held-out accuracy (pp) per domain and mean, the series' first -> last, CPU, ratios."""

    def delta(r: dict, key: str) -> float:
        return 100 * (r["eval"][key] - start[key])

    print(f"\n{title}")
    head = "".join(f"{d + ' Δg/Δs':>15}" for d in domains)
    print(
        f"{'variant':<26}{head}{'mean Δg':>9}{'mean Δs':>9}{series_name:>20}{'CPU-s':>8}"
        f"{'Δg/def':>8}{'Δs/def':>8}{'CPU/def':>8}"
    )
    ref_g, ref_s = delta(reference, "eval/mean/greedy"), delta(reference, "eval/mean/sampled")
    for name, r in rows.items():
        cells = "".join(
            f"{delta(r, f'eval/{d}/greedy'):+.1f}/{delta(r, f'eval/{d}/sampled'):+.1f}".rjust(15)
            for d in domains
        )
        g, s = delta(r, "eval/mean/greedy"), delta(r, "eval/mean/sampled")
        trend = f"{r['first']:.3f}->{r['last']:.3f}"
        print(
            f"{name:<26}{cells}{g:>+9.1f}{s:>+9.1f}{trend:>20}{r['cpu_s']:>8.1f}"
            f"{_ratio(g, ref_g, MIN_REFERENCE_PP):>8}{_ratio(s, ref_s, MIN_REFERENCE_PP):>8}"
            f"{_ratio(r['cpu_s'], reference['cpu_s']):>8}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="GRPO and supervised steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="parallel processes")
    ap.add_argument("--policy", default=None, help="policy (default: the engine's, 'tiny')")
    args = ap.parse_args()
    cfg = _config(args.policy)
    jobs = [("grpo", n, args.steps, args.seed, args.policy) for n in GRPO_VARIANTS]
    jobs += [("sft", n, args.steps, args.seed, args.policy) for n in SFT_VARIANTS]
    jobs += [("start", "start", 0, args.seed, args.policy)]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = dict(zip([j[1] for j in jobs], pool.map(_run, jobs, chunksize=1)))
    wall = time.perf_counter() - t0
    total = sum(r["job_cpu_s"] for r in results.values())
    start = results.pop("start")["eval"]
    domains = sorted({k.split("/")[1] for k in start} - {"mean"})
    o, g = cfg.optim, cfg.grpo
    print(
        f"policy {cfg.policy!r}, seed {args.seed}, {args.steps} steps; default optimizer: "
        f"{o.name} lr {o.lr:g} (grad clip {o.grad_clip:g}, warm-up {o.warmup_steps})"
    )
    print(
        "held-out accuracy at the start (greedy/sampled, %): "
        + ", ".join(
            f"{d} {100 * start[f'eval/{d}/greedy']:.1f}/{100 * start[f'eval/{d}/sampled']:.1f}"
            for d in [*domains, "mean"]
        )
    )
    reference = results["default"]
    print_table(
        f"1. GRPO ({g.prompts_per_step} prompts x {g.group_size} samples); Δ in pp",
        "reward first->last",
        {n: results[n] for n in GRPO_VARIANTS},
        start,
        reference,
        domains,
    )
    print_table(
        f"2. supervised continuation (AdamW lr {SFT_LR:g}, constant; ratios against "
        "GRPO's default)",
        "loss first->last",
        {n: results[n] for n in SFT_VARIANTS},
        start,
        reference,
        domains,
    )
    print(
        f"\nfirst->last: means over the first and last {_window(args.steps)} steps; "
        f"ratios need a default Δ of at least {MIN_REFERENCE_PP} pp. "
        f"Total {total:.0f} CPU-s in the variants' processes, {wall:.0f} s wall "
        f"with {args.workers} workers"
    )


if __name__ == "__main__":
    main()
