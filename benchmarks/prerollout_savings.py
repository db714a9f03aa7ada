"""Does pre-rollout skipping save generation? Post-hoc difffilter vs skipping + difffilter.

Both arms train the shipped tiny policy on the embedded engine with paired seeds (same seed:
same warm start, same task pools, same evaluation prompts) until they have the same number of
*effective* groups (groups whose rewards were not all equal, i.e. non-zero GRPO advantage):

- ``difffilter``: every drawn prompt is generated; zero-signal groups are dropped post hoc.
- ``<policy>+difffilter``: a skip policy (``greso`` by default, or ``thompson``) drops
  prompts before generation from their history; ``tasks.candidate_factor`` draws replacement
  prompts to keep the batch full.

Reported per seed: generated tokens per effective group (and their ratio, skipping /
baseline), steps, generation seconds, skipped prompts, replacements, the share of generated
groups with zero variance, and held-out greedy accuracy (start -> end); the paired accuracy
deltas get the harness's statistics (`dataflex_rl.harness.statistics.stats`: t interval, paired
bootstrap, exact sign-flip p-value, minimum detectable difference). The training pools are
bounded (``--train-size`` prompts per domain) so that prompts recur over several epochs, as in
real RLVR runs; with thousands of prompts and few steps nothing is ever skipped. Smaller pools
recur more and save more, but there GRPO itself loses held-out accuracy (overfitting).

    .venv/bin/python benchmarks/prerollout_savings.py [--seeds 0 1 2 3 4 5] [--effective 960]
        [--train-size 64] [--factor 4.0] [--policy greso|thompson] [--target 0.1] [--workers 2]

The default (64 prompts per domain, about 11 epochs) is the many-epoch regime where history
pays; ``--train-size 200 --effective 1920`` is a 4.5-epoch run. ``--factor`` must leave enough
candidates to fill the batch when half of them are skipped, or batches shrink and the skipping
arm takes more (smaller) optimizer steps than the baseline. The report ends with the
ceiling: the share of the baseline's tokens spent on zero-variance groups of prompts seen
before, the most any history-based skipper can save.

A benchmark, not a test (default: about 2.5 minutes wall on 2 cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

BASELINE = {"name": "difffilter", "select": {"preset": "difffilter"}}


def _skip_arm(args) -> dict:
    """The pre-rollout arm: difffilter plus the chosen skip policy."""
    if args.policy == "greso":
        actuator = {"name": "greso", "compound": not args.flat}
        if args.explore is not None:
            actuator.update(explore_prob=args.explore, min_explore=min(args.explore, 0.05))
        if args.target is not None:
            actuator["target_zero_variance"] = args.target
        if args.adapt_step is not None:
            actuator["adapt_step"] = args.adapt_step
    else:
        actuator = {
            "name": "thompson",
            "low": args.band[0],
            "high": args.band[1],
            "discount": args.discount,
        }
    return {
        "name": f"{args.policy}+difffilter",
        "select": {"preset": "difffilter"},
        "prerollout": {"actuator": actuator, "history_size": args.history},
    }


def _config(args, factor: float):
    from dataflex_rl.engine.config import load_config

    return load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "grpo": {"prompts_per_step": args.prompts, "group_size": args.group_size},
            "tasks": {"train_size": args.train_size, "candidate_factor": factor},
            "eval": {"per_domain": args.eval_per_domain, "samples": 0},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
        }
    )


def _track_visits(tr) -> dict:
    """Count, as the run goes, tokens of groups by first visit / revisit and zero variance.

    From the baseline arm this gives a ceiling for any history-based skipper: it can only
    avoid zero-variance groups of prompts seen before, so tokens per effective group can fall
    at most to (tokens - revisit zero-variance tokens) / tokens of the baseline's (were the
    training trajectory unchanged).
    """
    import torch

    from dataflex_rl.core.segment import segment_sum

    seen: set = set()
    out = {
        "first_tokens": 0.0,
        "first_zero_tokens": 0.0,
        "revisit_tokens": 0.0,
        "revisit_zero_tokens": 0.0,
    }
    decide = tr.driver.strategy.decide

    def counting_decide(batch):
        G = batch.num_groups
        tokens = segment_sum(batch.response_length.to(torch.float64), batch.group_ids, G)
        zero = (batch.group_std == 0).tolist()
        first_row = {}
        for row, g in enumerate(batch.group_ids.tolist()):  # instrumentation, 16 groups
            first_row.setdefault(g, row)
        for g, row in first_row.items():
            key = batch.prompt_keys[row]
            kind = "revisit" if key in seen else "first"
            out[f"{kind}_tokens"] += float(tokens[g])
            if zero[g]:
                out[f"{kind}_zero_tokens"] += float(tokens[g])
            seen.add(key)
        return decide(batch)

    tr.driver.strategy.decide = counting_decide
    return out


def _one(job: tuple) -> dict:
    arm, seed, args = job
    import torch

    from dataflex_rl.engine.trainer import EmbeddedTrainer

    torch.set_num_threads(1)
    strategy, factor = (BASELINE, 1.0) if arm == "difffilter" else (_skip_arm(args), args.factor)
    tr = EmbeddedTrainer(_config(args, factor), strategy, seed=seed)
    visits = _track_visits(tr)
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
    return {
        "arm": arm,
        "seed": seed,
        "steps": tr.step,
        "effective": effective,
        "tokens": tokens,
        "tokens_per_effective": tokens / max(effective, 1.0),
        "generate_s": gen_s,
        "skipped": skipped,
        "replacements": replacements,
        "tokens_saved_est": saved,
        "zero_variance_share": sum(zv_through) / max(len(zv_through), 1),
        "initial_accuracy": initial,
        "accuracy": ev["eval/mean/greedy"],
        **visits,
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    import numpy as np

    from dataflex_rl.harness.statistics import stats

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument(
        "--effective",
        type=int,
        default=960,
        help="effective (non-zero-advantage) groups each run trains on",
    )
    ap.add_argument("--train-size", type=int, default=64, help="training prompts per domain")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument(
        "--factor",
        type=float,
        default=4.0,
        help="candidate_factor of the greso arm (1.0: no replacements)",
    )
    ap.add_argument(
        "--explore",
        type=float,
        default=None,
        help="greso's initial exploration probability (default: greso's)",
    )
    ap.add_argument(
        "--adapt-step",
        type=float,
        default=None,
        help="greso's change of the exploration probability per step (default: greso's)",
    )
    ap.add_argument(
        "--target", type=float, default=None, help="greso's target_zero_variance (default: greso's)"
    )
    ap.add_argument(
        "--flat", action="store_true", help="greso compound=false: explore with p, not p ** run"
    )
    ap.add_argument(
        "--policy",
        choices=("greso", "thompson"),
        default="greso",
        help="the skip policy of the pre-rollout arm",
    )
    ap.add_argument(
        "--band", type=float, nargs=2, default=(0.1, 0.9), help="thompson's low and high"
    )
    ap.add_argument("--discount", type=float, default=1.0, help="thompson's discount")
    ap.add_argument("--history", type=int, default=4, help="prerollout history_size")
    ap.add_argument("--eval-per-domain", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=600)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    skip = f"{args.policy}+difffilter"
    arms = ("difffilter", skip)
    jobs = [(arm, s, args) for s in args.seeds for arm in arms]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        runs = pool.map(_one, jobs)
    by = {(r["arm"], r["seed"]): r for r in runs}
    if args.policy == "greso":
        knobs = (
            f"explore_prob {args.explore or 'default'}, adapt_step "
            f"{args.adapt_step or 'default'}, target_zero_variance "
            f"{args.target or 'default'}{', flat' if args.flat else ''}"
        )
    else:
        knobs = f"band {args.band[0]}..{args.band[1]}, discount {args.discount}"
    print(
        f"until {args.effective} effective groups; {args.prompts} prompts x G={args.group_size}"
        f" per step; pool {args.train_size}/domain; {args.policy} arm: candidate_factor "
        f"{args.factor}, history {args.history}, {knobs}"
    )
    print(
        f"{'seed':>4} {'arm':>20} {'steps':>5} {'eff':>4} {'tokens':>7} {'tok/eff':>7} "
        f"{'gen s':>6} {'skip':>5} {'repl':>5} {'zv share':>8} {'acc':>13}"
    )
    for r in runs:
        print(
            f"{r['seed']:>4} {r['arm']:>20} {r['steps']:>5} {r['effective']:>4.0f} "
            f"{r['tokens']:>7.0f} {r['tokens_per_effective']:>7.2f} {r['generate_s']:>6.1f} "
            f"{r['skipped']:>5.0f} {r['replacements']:>5.0f} {r['zero_variance_share']:>8.3f} "
            f"{r['initial_accuracy']:>6.3f}->{r['accuracy']:.3f}"
        )
    ratio = np.array(
        [
            by[skip, s]["tokens_per_effective"] / by["difffilter", s]["tokens_per_effective"]
            for s in args.seeds
        ]
    )
    acc = np.array([by[skip, s]["accuracy"] - by["difffilter", s]["accuracy"] for s in args.seeds])
    r_mean, r_lo, r_hi = stats.t_interval(ratio)
    a_mean, a_lo, a_hi = stats.t_interval(acc)
    p = stats.sign_flip_pvalue(acc)
    print(
        f"tokens per effective group, {args.policy} / baseline: {r_mean:.3f} "
        f"(95% t CI {r_lo:.3f}..{r_hi:.3f}; per seed {np.round(ratio, 3).tolist()}) -> "
        f"{(1 - r_mean) * 100:.1f}% fewer (target >= 30%)"
    )
    b_lo, b_hi = stats.bootstrap_interval(acc, np.random.default_rng(0))
    moved = {
        arm: float(
            np.mean([by[arm, s]["accuracy"] - by[arm, s]["initial_accuracy"] for s in args.seeds])
        )
        for arm in arms
    }
    print(
        f"held-out greedy accuracy, {args.policy} - baseline: {a_mean:+.3f} "
        f"(95% t CI {a_lo:+.3f}..{a_hi:+.3f}, paired bootstrap {b_lo:+.3f}..{b_hi:+.3f}, "
        f"sign-flip p={p:.3f}; per seed {np.round(acc, 3).tolist()}; smallest possible p "
        f"with {len(acc)} seeds = {stats.min_pvalue(len(acc)):.2g}; minimum detectable "
        f"difference {stats.mde_paired(float(np.std(acc, ddof=1)), len(acc)):.3f})"
    )
    print(
        "accuracy change from the shared start, mean over seeds: "
        + ", ".join(f"{arm} {v:+.3f}" for arm, v in moved.items())
    )
    base = [by["difffilter", s] for s in args.seeds]
    ceiling = np.array([b["revisit_zero_tokens"] / b["tokens"] for b in base])
    first = np.array([b["first_zero_tokens"] / b["tokens"] for b in base])
    print(
        f"baseline tokens spent on zero-variance groups: revisits {ceiling.mean():.3f}, "
        f"first visits {first.mean():.3f} -> a history-based skipper saves at most "
        f"{ceiling.mean() * 100:.1f}% of tokens per effective group here "
        f"({args.policy} reached {(1 - r_mean) / ceiling.mean() * 100:.0f}% of that)"
    )
    left = np.array(
        [by[skip, s]["revisit_zero_tokens"] / by[skip, s]["tokens"] for s in args.seeds]
    )
    print(
        f"{args.policy} arm: share of its tokens still spent on zero-variance revisits "
        f"{left.mean():.3f} (baseline {ceiling.mean():.3f})"
    )
    gen = np.array(
        [
            by[skip, s]["generate_s"]
            / by[skip, s]["effective"]
            / (by["difffilter", s]["generate_s"] / by["difffilter", s]["effective"])
            for s in args.seeds
        ]
    )
    print(
        f"generation seconds per effective group, {args.policy} / baseline: {gen.mean():.3f} "
        f"(per seed {np.round(gen, 3).tolist()})"
    )
    print(f"wall {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
