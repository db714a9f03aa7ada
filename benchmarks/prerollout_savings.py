"""Does pre-rollout skipping pay on prompts seen for the first time, at equal generation cost?

Every arm trains the shipped tiny policy on the embedded engine (paired seeds: same warm start,
task pools and held-out prompts) until it has spent the same generation cost, ``--tokens``
(`engine/generation_cost_tokens_total`: response tokens of trained and audited groups plus
the probe's forward passes), then is evaluated on the held-out prompts.

Regime 1, first visits (the embedded default: 2,000 training prompts per domain, so a run
draws each prompt about once):

- ``grpo``: plain GRPO, 16 prompts per step.
- ``dynamic``: dynamic sampling: difffilter (zero-variance groups dropped after generation)
  with over-draw, ``--overdraw`` prompts per step (21 = 16 / (1 - 0.24), the zero-variance
  share measured in plain GRPO runs here), so about 16 groups with signal are trained on.
  The engine has no refill loop (verl's DAPO ``filter_groups`` does), so the over-draw is a
  fixed count, not "until 16".
- ``probe``: dynamic sampling plus the ``probe`` skip policy (first visits: a logistic probe
  on the policy's prompt representation; revisits: greso), skipped candidates replaced
  (``candidate_factor``), an audit share of the skipped prompts generated, not trained on;
  with its default false-skip control (``--max-false-skip 0.1``: it skips only above the
  lowest threshold whose audited false-skip rate has a 95% upper bound <= 0.1; ``none``: a
  fixed ``--threshold``).

Regime 2, 4-5 epochs (``--epochs-pool`` prompts per domain; history and prediction together):
``dynamic`` vs ``probe``, fewer seeds, savings only; with ``--epoch-arms`` also
``greso`` (dynamic sampling plus the ``greso`` skip policy alone, an ``--audit`` share of its
plain-batch skips generated to measure its false-skip rate, no control) and ``greso_ctl``
(the same with its false-skip control, ``max_false_skip`` ``--greso-max-false-skip``).
``--regimes 2`` runs regime 2 only (no accuracy verdict then).

Reported: tokens per effective group (generation cost / trained groups whose rewards were not
all equal) vs dynamic sampling; the oracle ceiling (the share of dynamic sampling's generated
tokens spent on groups that came back zero-variance: what a perfect skipper saves at an
unchanged trajectory), split into first visits and revisits; the false-skip rate (audited
skipped prompts whose group came back informative); held-out accuracy at equal cost vs plain
GRPO with the harness's verdict (`analysis.analyze_summary`: Holm-adjusted exact sign-flip
test and corrected bootstrap interval; >= 6 paired seeds for a verdict). The last line:

    first visits: tokens per effective group -XX% vs dynamic sampling (ceiling -YY%),
    false-skip ZZ%, accuracy at equal tokens vs plain GRPO: VERDICT

    .venv/bin/python benchmarks/prerollout_savings.py [--seeds 0 1 2 3 4 5] [--tokens 150000]
        [--epoch-seeds 0 1 2] [--epochs-pool 200] [--epochs-tokens 150000] [--workers 2]
        [--threshold 0.5] [--layer 0] [--audit 0.1] [--max-false-skip 0.1|none]
        [--regimes 1 2] [--epoch-arms dynamic probe greso greso_ctl]
        [--greso-max-false-skip 0.1]

A benchmark, not a test (default: about 30 minutes wall on 2 idle cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

PROMPTS = 16
GROUP = 8


def _arms(args) -> dict[str, tuple[dict, dict]]:
    """arm -> (strategy, engine overrides)."""
    probe = {
        "name": "probe",
        "layer": args.layer,
        "threshold": args.threshold,
        "audit": args.audit,
        "min_observed": args.min_observed,
        "max_false_skip": args.max_false_skip,
    }
    dynamic = {"grpo": {"prompts_per_step": args.overdraw}}
    greso = {"name": "greso", "audit": args.audit}
    greso_ctl = {**greso, "max_false_skip": args.greso_max_false_skip}
    over = {**dynamic, "tasks": {"candidate_factor": args.factor}}
    return {
        "grpo": ({"name": "grpo"}, {}),
        "dynamic": ({"name": "dynamic", "select": {"preset": "difffilter"}}, dynamic),
        "probe": (
            {
                "name": "probe",
                "select": {"preset": "difffilter"},
                "prerollout": {"actuator": probe},
            },
            over,
        ),
        **{
            name: (
                {"name": name, "select": {"preset": "difffilter"}, "prerollout": {"actuator": a}},
                over,
            )
            for name, a in (("greso", greso), ("greso_ctl", greso_ctl))
        },
    }


def _config(pool: int, tokens: int, overrides: dict, eval_per_domain: int):
    from dataflex_rl.hosts.engine.config import load_config

    tasks = {"train_size": pool, **overrides.get("tasks", {})}
    grpo = {"prompts_per_step": PROMPTS, "group_size": GROUP, **overrides.get("grpo", {})}
    return load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "steps": 10_000,
            "generated_tokens": tokens,
            "grpo": grpo,
            "tasks": tasks,
            "eval": {"per_domain": eval_per_domain, "samples": 4},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
        }
    )


def _track_visits(tr) -> dict:
    """Tokens of trained groups by first visit / revisit, and of those zero-variance."""
    import torch

    from dataflex_rl.core.segment import segment_min, segment_sum

    seen: set = set()
    out = {"first_tokens": 0.0, "first_zero": 0.0, "revisit_tokens": 0.0, "revisit_zero": 0.0}
    decide = tr.driver.strategy.decide

    def counting_decide(batch):
        G = batch.num_groups
        tokens = segment_sum(batch.response_length.to(torch.float64), batch.group_ids, G)
        zero = batch.group_std == 0
        first = segment_min(torch.arange(batch.batch_size), batch.group_ids, G, empty=0)
        keys = [batch.prompt_keys[r] for r in first.tolist()]
        again = torch.tensor([k in seen for k in keys])
        for kind, m in (("first", ~again), ("revisit", again)):
            out[f"{kind}_tokens"] += float(tokens[m].sum())
            out[f"{kind}_zero"] += float(tokens[m & zero].sum())
        seen.update(keys)
        return decide(batch)

    tr.driver.strategy.decide = counting_decide
    return out


SUMS = (
    "engine/generation_cost_tokens",
    "engine/tokens_generated",
    "engine/tokens_audit",
    "engine/tokens_zero_variance",
    "engine/groups_effective",
    "engine/prompts_generated",
    "dataflex/prerollout/probe_tokens",
    "dataflex/prerollout/skipped",
    "dataflex/prerollout/skipped_first",
    "dataflex/prerollout/skipped_revisit",
    "dataflex/prerollout/skipped_probe",
    "dataflex/prerollout/skipped_easy",
    "dataflex/prerollout/skipped_hard",
    "dataflex/prerollout/audit_groups",
    "dataflex/prerollout/audit_informative",
)


#: the skip policies' false-skip control, read at the last step that reported it
CONTROL = (
    "probe_threshold",
    "probe_audit_sample",
    "probe_false_skip_bound",
    *(
        f"greso_{m}_{kind}"
        for m in ("run_threshold", "audit_sample", "false_skip_bound")
        for kind in ("easy", "hard")
    ),
)


def _tables(tr) -> dict:
    """greso's control at the end: kind -> {run length: [audited entries, informative]}."""
    parts = tr.driver.strategy.parts
    policy = parts["prerollout"][1] if "prerollout" in parts else None
    if getattr(policy, "max_false_skip", None) is None or not hasattr(policy, "_audit_run"):
        return {}
    out: dict = {}
    for kind in ("easy", "hard"):
        rows = out.setdefault(kind, {})
        runs = policy._audit_run[kind].tolist()
        for r, i in zip(runs, policy._audit_informative[kind].tolist()):
            row = rows.setdefault(int(r), [0, 0])
            row[0] += 1
            row[1] += int(i)
    return out


def _one(job: tuple) -> dict:
    regime, arm, seed, strategy, overrides, pool, tokens, eval_per_domain = job
    import torch

    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tr = EmbeddedTrainer(_config(pool, tokens, overrides, eval_per_domain), strategy, seed=seed)
    visits = _track_visits(tr)
    sums = dict.fromkeys(SUMS, 0.0)
    last: dict = {}  # the probe's control at the last step that reported it
    while tr.cost_tokens < tokens:
        m = tr.train_step()
        for k in SUMS:
            sums[k] += m.get(k, 0.0)
        for k in CONTROL:
            if f"dataflex/prerollout/{k}" in m:
                last[k] = m[f"dataflex/prerollout/{k}"]
    ev = tr.evaluate()
    return {
        "tables": _tables(tr),
        "regime": regime,
        "arm": arm,
        "seed": seed,
        "steps": tr.step,
        **{k.split("/")[-1]: v for k, v in sums.items()},
        **visits,
        "threshold": last.get("probe_threshold", float("nan")),
        "audit_sample": last.get("probe_audit_sample", 0.0),
        **{k: last.get(k, float("nan")) for k in CONTROL[3:]},
        "sampled": ev["eval/mean/sampled"],
        "greedy": ev["eval/mean/greedy"],
        "wall_s": time.perf_counter() - t0,
    }


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _rate(informative: float, audits: float) -> str:
    return f"{informative / audits * 100:.1f}%" if audits else "n/a (nothing audited)"


def _signed(x: float) -> str:
    return f"{x * 100:+.1f}%"


def main() -> None:
    import numpy as np

    from dataflex_rl.harness.statistics.analysis import TOO_FEW, StatsOptions, analyze_summary

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--tokens", type=int, default=150_000, help="generation cost of every arm")
    ap.add_argument("--pool", type=int, default=2000, help="regime 1: prompts per domain")
    ap.add_argument("--epoch-seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--epochs-pool", type=int, default=200, help="regime 2: prompts per domain")
    ap.add_argument("--epochs-tokens", type=int, default=150_000)
    ap.add_argument("--overdraw", type=int, default=21, help="dynamic sampling: prompts per step")
    ap.add_argument("--factor", type=float, default=2.0, help="probe arm: candidate_factor")
    ap.add_argument("--threshold", type=float, default=0.5, help="probe: skip threshold")
    ap.add_argument("--layer", type=int, default=0, help="probe: representation layer")
    ap.add_argument("--audit", type=float, default=0.1, help="probe: audit share")
    ap.add_argument("--min-observed", type=int, default=128, help="probe: outcomes before skipping")
    ap.add_argument(
        "--max-false-skip",
        type=lambda v: None if v == "none" else float(v),
        default=0.1,
        help="probe: target false-skip rate of its control ('none': a fixed --threshold)",
    )
    ap.add_argument("--regimes", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    ap.add_argument(
        "--epoch-arms",
        nargs="+",
        default=["dynamic", "probe"],
        choices=["dynamic", "probe", "greso", "greso_ctl"],
        help="regime 2: the arms (dynamic is always run: the reference)",
    )
    ap.add_argument(
        "--greso-max-false-skip",
        type=float,
        default=0.1,
        help="greso_ctl: target false-skip rate of greso's control (audit: --audit)",
    )
    ap.add_argument("--eval-per-domain", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if 1 not in args.regimes:
        args.seeds = []
    if 2 not in args.regimes:
        args.epoch_seeds = []
    epoch_arms = ["dynamic", *(a for a in args.epoch_arms if a != "dynamic")]
    t0 = time.perf_counter()
    arms = _arms(args)
    jobs = [
        ("first", a, s, *arms[a], args.pool, args.tokens, args.eval_per_domain)
        for s in args.seeds
        for a in ("grpo", "dynamic", "probe")
    ] + [
        ("epochs", a, s, *arms[a], args.epochs_pool, args.epochs_tokens, args.eval_per_domain)
        for s in args.epoch_seeds
        for a in epoch_arms
    ]
    runs = []
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for r in pool.imap(_one, jobs):  # in job order, each as soon as it and those before end
            runs.append(r)
            print(
                f"done: {r['regime']} {r['arm']} seed {r['seed']}: {r['steps']} steps, cost "
                f"{r['generation_cost_tokens']:.0f}, effective groups {r['groups_effective']:.0f}, "
                f"audited {r['audit_groups']:.0f} ({r['audit_informative']:.0f} informative), "
                f"threshold {r['threshold']:.3f}, sampled {r['sampled']:.3f}, "
                f"{time.perf_counter() - t0:.0f}s",
                flush=True,
            )
    by = {(r["regime"], r["arm"], r["seed"]): r for r in runs}
    print(
        f"equal generation cost: {args.tokens} tokens (first visits, pool {args.pool}/domain), "
        f"{args.epochs_tokens} (epochs, pool {args.epochs_pool}/domain); G={GROUP}; plain GRPO "
        f"{PROMPTS} prompts/step, dynamic sampling and probe {args.overdraw}; probe: layer "
        f"{args.layer}, threshold {args.threshold}, audit {args.audit}, min_observed "
        f"{args.min_observed}, max_false_skip {args.max_false_skip}, candidate_factor "
        f"{args.factor}, revisits greso"
    )
    head = (
        f"{'regime':>6} {'arm':>8} {'seed':>4} {'steps':>5} {'cost':>7} {'probe':>6} "
        f"{'eff':>5} {'tok/eff':>7} {'zv tok':>6} {'skip 1st':>8} {'skip rev':>8} "
        f"{'audit':>5} {'fs':>4} {'aud tok':>7} {'thr':>5} {'table':>5} {'sampled':>7} "
        f"{'greedy':>6}"
    )
    print(head)
    for r in runs:
        tpe = r["generation_cost_tokens"] / max(r["groups_effective"], 1.0)
        zv = r["tokens_zero_variance"] / max(r["tokens_generated"], 1.0)
        print(
            f"{r['regime']:>6} {r['arm']:>8} {r['seed']:>4} {r['steps']:>5} "
            f"{r['generation_cost_tokens']:>7.0f} {r['probe_tokens']:>6.0f} "
            f"{r['groups_effective']:>5.0f} {tpe:>7.2f} {zv:>6.3f} {r['skipped_first']:>8.0f} "
            f"{r['skipped_revisit']:>8.0f} {r['audit_groups']:>5.0f} "
            f"{r['audit_informative']:>4.0f} {r['tokens_audit']:>7.0f} {r['threshold']:>5.3f} "
            f"{r['audit_sample']:>5.0f} {r['sampled']:>7.3f} {r['greedy']:>6.3f}"
        )

    def tpe(r):
        return r["generation_cost_tokens"] / max(r["groups_effective"], 1.0)

    def savings(regime, seeds, arm="probe"):
        ratio = np.array([tpe(by[regime, arm, s]) / tpe(by[regime, "dynamic", s]) for s in seeds])
        dyn = [by[regime, "dynamic", s] for s in seeds]
        ceiling = np.array([r["tokens_zero_variance"] / r["tokens_generated"] for r in dyn])
        first = np.array([r["first_zero"] / r["tokens_generated"] for r in dyn])
        revisit = np.array([r["revisit_zero"] / r["tokens_generated"] for r in dyn])
        pr = [by[regime, arm, s] for s in seeds]
        audits = sum(r["audit_groups"] for r in pr)
        fs = _rate(sum(r["audit_informative"] for r in pr), audits)
        bare = np.array(
            [
                (by[regime, arm, s]["generation_cost_tokens"] - by[regime, arm, s]["tokens_audit"])
                / max(by[regime, arm, s]["groups_effective"], 1.0)
                / tpe(by[regime, "dynamic", s])
                for s in seeds
            ]
        )
        return 1 - ratio, ceiling, first, revisit, fs, audits, pr, 1 - bare

    out = {}
    for regime, seeds in (("first", args.seeds), ("epochs", args.epoch_seeds)):
        if not seeds or (regime == "epochs" and "probe" not in epoch_arms):
            continue
        saved, ceiling, first, revisit, fs, audits, pr, bare = savings(regime, seeds)
        skipped_first = sum(r["skipped_first"] for r in pr)
        skipped_rev = sum(r["skipped_revisit"] for r in pr)
        by_probe = sum(r["skipped_probe"] for r in pr)
        thr = ", ".join(f"{r['threshold']:.3f}" for r in pr)
        print(
            f"[{regime}] tokens per effective group, probe vs dynamic sampling: "
            f"{_signed(-saved.mean())} (per seed {np.round(-saved * 100, 1).tolist()}); ceiling "
            f"-{_pct(ceiling.mean())} (zero-variance tokens of dynamic sampling: first visits "
            f"{_pct(first.mean())}, revisits {_pct(revisit.mean())}); reached "
            f"{saved.mean() / ceiling.mean() * 100:.0f}% of the ceiling; false-skip {fs} "
            f"({audits:.0f} audited groups); skipped plain-batch prompts: first visits "
            f"{skipped_first:.0f}, revisits {skipped_rev:.0f}; candidates skipped by the probe "
            f"{by_probe:.0f}, its threshold at the end per seed [{thr}] (1: the control allows "
            f"no skip); without the audit's tokens {_signed(-bare.mean())}"
        )
        out[regime] = (saved.mean(), ceiling.mean(), fs)
    from dataflex_rl.prerollout.probe import false_skip_bound

    for arm in ("greso", "greso_ctl"):
        seeds = args.epoch_seeds
        if arm not in epoch_arms or not seeds:
            continue
        saved, ceiling, _, _, fs, audits, pr, bare = savings("epochs", seeds, arm)
        informative = sum(r["audit_informative"] for r in pr)
        control = "; ".join(
            f"seed {r['seed']}: run threshold easy {r['greso_run_threshold_easy']:.0f} hard "
            f"{r['greso_run_threshold_hard']:.0f} (1e6: skips nothing), table "
            f"{r['greso_audit_sample_easy']:.0f}/{r['greso_audit_sample_hard']:.0f}"
            for r in pr
        )
        if arm == "greso_ctl":
            pooled: dict = {}
            for r in pr:
                for kind, rows in r["tables"].items():
                    for run, (n, k) in rows.items():
                        row = pooled.setdefault(kind, {}).setdefault(run, [0, 0])
                        row[0] += n
                        row[1] += k
            control += "; audit tables pooled over seeds, run: informative/entries: " + "; ".join(
                f"{kind} "
                + ", ".join(f"{run}: {k}/{n}" for run, (n, k) in sorted(pooled[kind].items()))
                for kind in sorted(pooled)
            )
        print(
            f"[epochs] {arm}: tokens per effective group vs dynamic sampling "
            f"{_signed(-saved.mean())} (per seed {np.round(-saved * 100, 1).tolist()}), without "
            f"the audit's tokens {_signed(-bare.mean())}; ceiling -{_pct(ceiling.mean())}; "
            f"false-skip share of audited skips {fs} ({audits:.0f} audited groups, one-sided "
            f"95% bound {false_skip_bound(int(informative), int(audits), 0.95):.3f}); skipped "
            f"plain-batch prompts {sum(r['skipped_revisit'] for r in pr):.0f}, candidates "
            f"skipped easy {sum(r['skipped_easy'] for r in pr):.0f} hard "
            f"{sum(r['skipped_hard'] for r in pr):.0f}"
            + (f"; control at the end: {control}" if arm == "greso_ctl" else "")
        )
    if not args.seeds:
        print(f"wall {time.perf_counter() - t0:.0f}s")
        return
    seeds = [str(s) for s in args.seeds]
    methods = ["grpo", "dynamic", "probe"]
    verdict = "n/a"
    for metric in ("sampled", "greedy"):
        matrix = np.array([[by["first", m, int(s)][metric] for s in seeds] for m in methods])
        res = analyze_summary("mean", "average", methods, matrix, "grpo", StatsOptions())
        parts = []
        for c in res.comparisons:
            # the MDE as the report writes it: "none" where no verdict is possible
            mde = "none" if c.mde == float("inf") else f"{c.mde:.3f}"
            parts.append(
                f"{c.method} {c.delta:+.3f} (p_holm {c.p_holm:.3f}, {c.verdict}; MDE {mde})"
            )
        # the headline: the probe against plain GRPO, decided beforehand, as its own family
        # (6 paired seeds can decide one comparison; the three-arm family above needs 7)
        idx = [methods.index("grpo"), methods.index("probe")]
        own = analyze_summary(
            "mean", "average", ["grpo", "probe"], matrix[idx], "grpo", StatsOptions()
        ).comparisons[0]
        parts.append(
            f"probe alone (a family of one): {own.delta:+.3f}, p {own.p:.3f}, corrected CI "
            f"{own.corrected_ci[0]:+.3f}..{own.corrected_ci[1]:+.3f}, {own.verdict}"
        )
        if metric == "sampled":
            verdict = own.verdict if own.verdict_possible else f"{TOO_FEW} ({own.n_pairs})"
        means = ", ".join(f"{m} {matrix[i].mean():.3f}" for i, m in enumerate(methods))
        print(
            f"[first] held-out {metric} accuracy at equal cost: {means}; vs grpo: "
            + "; ".join(parts)
        )
    print(f"wall {time.perf_counter() - t0:.0f}s")
    saved, ceiling, fs = out["first"]
    print(
        f"first visits: tokens per effective group {_signed(-saved)} vs dynamic sampling (ceiling "
        f"-{_pct(ceiling)}), false-skip {fs}, accuracy at equal tokens vs plain GRPO: "
        f"{verdict}"
    )


if __name__ == "__main__":
    main()
