"""Does pre-rollout skipping save generation? Post-hoc difffilter vs GRESO + difffilter.

Both arms train the shipped tiny policy on the embedded engine with paired seeds (same seed:
same warm start, same task pools, same evaluation prompts) until they have the same number of
*effective* groups (groups whose rewards were not all equal, i.e. non-zero GRPO advantage):

- ``difffilter``: every drawn prompt is generated; zero-signal groups are dropped post hoc.
- ``greso+difffilter``: GRESO skips prompts whose recent groups were all-correct or all-wrong
  before generation; ``tasks.candidate_factor`` draws replacement prompts to keep the batch full.

Reported per seed: generated tokens per effective group (and their ratio, greso / baseline),
steps, generation seconds, skipped prompts, replacements, the share of generated groups
with zero variance, and held-out greedy accuracy (start -> end); the paired accuracy deltas get
the harness's statistics (`dataflex_rl.harness.stats`: t interval, exact sign-flip p-value).
The training pools are small (``--train-size`` prompts per domain) so that prompts recur and
have a history; with thousands of prompts and few steps nothing is ever skipped.

    .venv/bin/python benchmarks/prerollout_savings.py [--seeds 0 1 2] [--effective 240]
        [--train-size 24] [--factor 2.0] [--workers 2]

A benchmark, not a test (default: about 1.5 minutes wall on 2 cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

BASELINE = {"name": "difffilter", "select": {"preset": "difffilter"}}
GRESO = {"name": "greso+difffilter", "select": {"preset": "difffilter"},
         "prerollout": {"actuator": {"name": "greso"}, "history_size": 4}}


def _config(args, factor: float):
    from dataflex_rl.engine.config import load_config

    return load_config({
        "policy": "tiny", "threads": 1,
        "grpo": {"prompts_per_step": args.prompts, "group_size": args.group_size},
        "tasks": {"train_size": args.train_size, "candidate_factor": factor},
        "eval": {"per_domain": args.eval_per_domain, "samples": 0},
        "log": {"progress": False, "plots": False, "checkpoint_every": 0}})


def _one(job: tuple) -> dict:
    arm, seed, args = job
    import torch

    from dataflex_rl.engine.trainer import GRPOTrainer

    torch.set_num_threads(1)
    greso = {**GRESO, "prerollout": {**GRESO["prerollout"], "actuator": {
        "name": "greso", "explore_prob": args.explore, "min_explore": min(args.explore, 0.05),
        "adapt_step": args.adapt_step}}}
    strategy, factor = (BASELINE, 1.0) if arm == "difffilter" else (greso, args.factor)
    tr = GRPOTrainer(_config(args, factor), strategy, seed=seed)
    initial = tr.evaluate()["eval/mean/greedy"]
    t0 = time.perf_counter()
    effective = tokens = gen_s = skipped = replacements = saved = 0.0
    zv_through = []
    while effective < args.effective and tr.step < args.max_steps:
        m = tr.train_step()
        n = m.get("engine/prompts_generated", 0.0)
        zero = m.get("dataflex/zero_advantage_group_fraction", 0.0)
        effective += round(n * (1.0 - zero))
        tokens += m.get("engine/tokens_generated", 0.0)
        gen_s += m.get("time/generate_s", 0.0)
        skipped += m.get("dataflex/prerollout/skipped", 0.0)
        replacements += m.get("dataflex/prerollout/replacements", 0.0)
        saved += m.get("dataflex/prerollout/tokens_saved_est", 0.0)
        if n:
            zv_through.append(zero)
    ev = tr.evaluate()
    return {"arm": arm, "seed": seed, "steps": tr.step, "effective": effective,
            "tokens": tokens, "tokens_per_effective": tokens / max(effective, 1.0),
            "generate_s": gen_s, "skipped": skipped, "replacements": replacements,
            "tokens_saved_est": saved,
            "zero_variance_share": sum(zv_through) / max(len(zv_through), 1),
            "initial_accuracy": initial, "accuracy": ev["eval/mean/greedy"],
            "wall_s": time.perf_counter() - t0}


def main() -> None:
    import numpy as np

    from dataflex_rl.harness import stats

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--effective", type=int, default=240,
                    help="effective (non-zero-advantage) groups each run trains on")
    ap.add_argument("--train-size", type=int, default=24, help="training prompts per domain")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--factor", type=float, default=2.0,
                    help="candidate_factor of the greso arm (1.0: no replacements)")
    ap.add_argument("--explore", type=float, default=0.1,
                    help="greso's initial exploration probability")
    ap.add_argument("--adapt-step", type=float, default=0.01,
                    help="greso's change of the exploration probability per step")
    ap.add_argument("--eval-per-domain", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    jobs = [(arm, s, args) for s in args.seeds for arm in ("difffilter", "greso+difffilter")]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        runs = pool.map(_one, jobs)
    by = {(r["arm"], r["seed"]): r for r in runs}
    print(f"until {args.effective} effective groups; {args.prompts} prompts x G={args.group_size}"
          f" per step; pool {args.train_size}/domain; greso candidate_factor {args.factor}, "
          f"explore_prob {args.explore}, adapt_step {args.adapt_step}")
    print(f"{'seed':>4} {'arm':>17} {'steps':>5} {'eff':>4} {'tokens':>7} {'tok/eff':>7} "
          f"{'gen s':>6} {'skip':>5} {'repl':>5} {'zv share':>8} {'acc':>13}")
    for r in runs:
        print(f"{r['seed']:>4} {r['arm']:>17} {r['steps']:>5} {r['effective']:>4.0f} "
              f"{r['tokens']:>7.0f} {r['tokens_per_effective']:>7.2f} {r['generate_s']:>6.1f} "
              f"{r['skipped']:>5.0f} {r['replacements']:>5.0f} {r['zero_variance_share']:>8.3f} "
              f"{r['initial_accuracy']:>6.3f}->{r['accuracy']:.3f}")
    ratio = np.array([by["greso+difffilter", s]["tokens_per_effective"]
                      / by["difffilter", s]["tokens_per_effective"] for s in args.seeds])
    acc = np.array([by["greso+difffilter", s]["accuracy"] - by["difffilter", s]["accuracy"]
                    for s in args.seeds])
    r_mean, r_lo, r_hi = stats.t_interval(ratio)
    a_mean, a_lo, a_hi = stats.t_interval(acc)
    p = stats.sign_flip_pvalue(acc)
    print(f"tokens per effective group, greso / baseline: {r_mean:.3f} "
          f"(95% t CI {r_lo:.3f}..{r_hi:.3f}; per seed {np.round(ratio, 3).tolist()}) -> "
          f"{(1 - r_mean) * 100:.1f}% fewer (target >= 30%)")
    print(f"held-out greedy accuracy, greso - baseline: {a_mean:+.3f} "
          f"(95% t CI {a_lo:+.3f}..{a_hi:+.3f}, sign-flip p={p:.3f}; "
          f"per seed {np.round(acc, 3).tolist()}; min detectable p with "
          f"{len(acc)} seeds = {stats.min_pvalue(len(acc)):.3f})")
    print(f"wall {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
