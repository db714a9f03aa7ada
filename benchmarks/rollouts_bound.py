"""How far can per-prompt rollout budgets go? Effective groups per 1k tokens, from each p.

Issue 41's target for per-prompt budgets: at equal generated tokens, effective groups (a
trained group whose rewards are not all equal) per 1,000 generated tokens at least 1.2x plain
GRPO's on the embedded default. A budget keeps the step's prompts and its responses (16 x 8)
and moves responses between prompts, so its only lever is how many of the 16 groups carry
signal. This benchmark measures, from each prompt's own success probability, how far any
allocation of the step's responses can move that, on the instrument of
`benchmarks/prerollout_bound.py` (whose sampling it reuses): the first-visit prompts a plain
GRPO run draws, step by step as the run draws them (16 a step), each sampled ``--samples`` (M)
times with the engine's sampler and verifiers, under the warm start and (``--steps`` > 0) a
plain-GRPO policy at its middle and final step.

Per step (its 16 prompts, B = 16 x G responses), in expectation over the sampling noise:

- **plain** G each: sum of P(mixed) = 1 - p^G - (1-p)^G (hypergeometric over the M samples,
  unbiased), tokens G x each prompt's mean length;
- **all_mixed**: every prompt that can be mixed is (0 < c < M of its samples right) at
  plain GRPO's tokens: no allocation of the same responses decided before generation can do
  better (optimistic: unlimited samples); a sequential rule can, by spending fewer tokens on
  prompts that show signal early;
- **oracle allocation**: `allocate_counts` (the product's greedy, value ``signal``, 2..32
  responses, B in all) on the prompts' p, scored on samples the allocation did not read (the
  M samples split in two halves: allocate on one half's rate, score the other half's
  hypergeometric P(mixed) for n <= M/2; both ways, averaged): what the Knapsack-RL rule
  reaches when it knows every prompt's p about as well as 48 samples tell;
- **domain allocation**: the same greedy on each prompt's domain mean rate (what
  `knapsack_rl` knows on a first visit);
- **sequential** (no oracle: what a rule that reads only the step's own outcomes does within
  the same B): ``--first`` responses each, then rounds of ``--more`` to each prompt whose
  responses so far all agree, lowest count first, until B is spent; Monte Carlo over
  ``--draws`` orderings of each prompt's M samples (sampling without replacement: counts
  never exceed M), at most ``--max-rounds`` rounds after the first: the ``sequential`` mode
  of the ``rollouts`` section (preset ``adaptive_rollout``: 2, 2, 6 rounds) on these samples.

Each line: effective groups per step and per 1k tokens, and that rate against plain GRPO's
(the issue's ratio). The last line per policy compares the best rule's ratio with 1.2.

    .venv/bin/python benchmarks/rollouts_bound.py [--prompts 640] [--samples 96]
        [--steps 0] [--seed 0] [--first 2] [--more 2] [--max-rounds 6] [--draws 200]
        [--workers 2]

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prerollout_bound import _comb, _config, _estimate, _train  # noqa: E402

TARGET = 1.2


def p_mixed(correct: np.ndarray, n: np.ndarray) -> np.ndarray:
    """[N] unbiased P(a group of n[i] samples of prompt i holds both outcomes), from its
    samples ``correct`` [N, M] (a group is a uniform n-subset of them; n <= M)."""
    correct = np.asarray(correct, dtype=bool)
    N, M = correct.shape
    c = correct.sum(1)
    out = np.empty(N)
    for i in range(N):
        k = int(n[i])
        if k > M:
            raise ValueError(f"p_mixed: n {k} above the {M} samples")
        total = math.comb(M, k)
        out[i] = 1.0 - (_comb(c[i : i + 1], k)[0] + _comb(M - c[i : i + 1], k)[0]) / total
    return out


def allocate(p: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """The product's greedy (`allocate_counts`, value ``signal``)."""
    import torch

    from dataflex_rl.core.rollouts import allocate_counts

    return allocate_counts(torch.as_tensor(p, dtype=torch.float64), total, lo, hi, "signal").numpy()


def sequential(
    correct: np.ndarray,
    lengths: np.ndarray,
    total: int,
    first: int,
    more: int,
    max_rounds: int,
    rng,
) -> tuple[float, float]:
    """One draw of the sequential rule on one step: (effective groups, tokens)."""
    N, M = correct.shape
    order = np.argsort(rng.random((N, M)), axis=1)
    c = np.take_along_axis(correct, order, 1)
    ln = np.take_along_axis(lengths, order, 1)
    n = np.full(N, min(first, M))
    spent = int(n.sum())
    rounds = 0
    while spent < total and rounds < max_rounds:
        rounds += 1
        seen = np.arange(M)[None, :] < n[:, None]
        right = (c & seen).sum(1)
        uniform = (right == 0) | (right == n)
        open_ = np.flatnonzero(uniform & (n < M))
        if open_.size == 0:
            break
        for i in open_[np.argsort(n[open_], kind="stable")]:
            k = min(more, M - int(n[i]), total - spent)
            if k <= 0:
                break
            n[i] += k
            spent += k
    seen = np.arange(M)[None, :] < n[:, None]
    right = (c & seen).sum(1)
    eff = float(((right > 0) & (right < n)).sum())
    return eff, float((ln * seen).sum())


def analyze(
    d: dict, G: int, P: int, first: int, more: int, max_rounds: int, draws: int, seed: int
) -> dict:
    """Per rule: (effective groups per step, tokens per step), over the steps' batches."""
    correct, lengths = d["correct"], d["lengths"].astype(np.float64)
    N, M = correct.shape
    steps = N // P
    B = P * G
    half = M // 2
    dom = np.asarray(d["domain"])
    rng = np.random.default_rng(seed)
    mean_len = lengths.mean(1)
    rate = correct.mean(1)
    dom_rate = {k: rate[dom == k].mean() for k in set(dom.tolist())}
    acc = {k: [0.0, 0.0] for k in ("plain", "all_mixed", "oracle", "domain", "sequential")}
    hi = min(32, half)
    for s in range(steps):
        sl = slice(s * P, (s + 1) * P)
        c, ln, ml = correct[sl], lengths[sl], mean_len[sl]
        plain = p_mixed(c, np.full(P, G))
        acc["plain"][0] += plain.sum()
        acc["plain"][1] += (G * ml).sum()
        k = c.sum(1)
        acc["all_mixed"][0] += ((k > 0) & (k < M)).sum()
        acc["all_mixed"][1] += (G * ml).sum()
        # oracle: allocate on one half's rate, score on the other half (both ways)
        for a, b in ((slice(0, half), slice(half, M)), (slice(half, M), slice(0, half))):
            n = allocate(c[:, a].mean(1), B, 2, hi)
            acc["oracle"][0] += p_mixed(c[:, b], n).sum() / 2
            acc["oracle"][1] += (n * ln[:, b].mean(1)).sum() / 2
        n = allocate(np.array([dom_rate[x] for x in dom[sl]]), B, 2, min(32, M))
        acc["domain"][0] += p_mixed(c, n).sum()
        acc["domain"][1] += (n * ml).sum()
        e = t = 0.0
        for _ in range(draws):
            de, dt = sequential(c, ln, B, first, more, max_rounds, rng)
            e, t = e + de, t + dt
        acc["sequential"][0] += e / draws
        acc["sequential"][1] += t / draws
    base = acc["plain"][0] / acc["plain"][1]
    out = {}
    for k, (e, t) in acc.items():
        out[k] = {"eff_per_step": e / steps, "per_1k": 1000 * e / t, "ratio": (e / t) / base}
    return {"label": d["label"], "steps": steps, "rules": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=640, help="first-visit prompts per policy")
    ap.add_argument("--samples", type=int, default=96, help="M: samples per prompt")
    ap.add_argument("--steps", type=int, default=0, help="plain-GRPO steps (0: warm start only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=2, help="sequential: responses each first")
    ap.add_argument("--more", type=int, default=2, help="sequential: responses per round")
    ap.add_argument("--max-rounds", type=int, default=6, help="sequential: rounds after the first")
    ap.add_argument("--draws", type=int, default=200, help="sequential: Monte Carlo draws")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cfg = _config()
    G, P = cfg.grpo.group_size, cfg.grpo.prompts_per_step
    t0 = time.perf_counter()
    n_steps = math.ceil(args.prompts / P)
    policies = [("warm start", 0)]
    if args.steps:
        policies += [(f"GRPO step {args.steps // 2}", args.steps // 2)]
        policies += [(f"GRPO step {args.steps}", args.steps)]
    bounds = np.linspace(0, n_steps, args.workers + 1).round().astype(int)
    with mp.get_context("spawn").Pool(args.workers) as pool:
        states = {0: None}
        if args.steps:
            run = pool.apply(_train, ((args.seed, args.steps, {args.steps // 2, args.steps}),))
            states.update(run["states"])
        for label, step in policies:
            jobs = [
                (args.seed, label, states[step], step, step + int(a), step + int(b), args.samples)
                for a, b in zip(bounds[:-1], bounds[1:])
                if b > a
            ]
            parts = sorted(pool.map(_estimate, jobs), key=lambda p: p["start"])
            # first visits only: a step's batch is whole only where no prompt was a revisit
            d = {
                "label": label,
                "correct": np.concatenate([p["correct"] for p in parts]),
                "lengths": np.concatenate([p["lengths"] for p in parts]),
                "domain": sum((p["domain"] for p in parts), []),
            }
            usable = len(d["domain"]) // P * P
            d = {k: (v[:usable] if k != "label" else v) for k, v in d.items()}
            r = analyze(d, G, P, args.first, args.more, args.max_rounds, args.draws, args.seed)
            print(f"\n{label}: {r['steps']} steps x {P} first-visit prompts x M={args.samples}")
            print(f"  {'rule':<12} {'eff/step':>9} {'eff/1k tok':>11} {'vs plain':>9}")
            for k, v in r["rules"].items():
                print(f"  {k:<12} {v['eff_per_step']:9.2f} {v['per_1k']:11.2f} {v['ratio']:8.2f}x")
            rules = r["rules"]
            best = max((v["ratio"], k) for k, v in rules.items() if k not in ("plain", "all_mixed"))
            print(
                f"  {label}: best rule {best[1]} {best[0]:.2f}x "
                f"(target {TARGET}x: {'reached' if best[0] >= TARGET else 'not reached'}); "
                f"any allocation before generation <= {rules['all_mixed']['ratio']:.2f}x, "
                f"the knapsack rule knowing p {rules['oracle']['ratio']:.2f}x",
                flush=True,
            )
    print(f"\nwall {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
