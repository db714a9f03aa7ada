"""The strategies practitioners ask for next, each against plain GRPO at equal steps and at
equal generated tokens (issue 41, item 6).

Arms (`ARMS`, each a preset, against plain GRPO, preset ``baseline``): ``ragen_snr`` (top-p
reward-variance selection), ``maxrl`` (difficulty-weighted advantages),
``nemotron_curriculum`` (target-difficulty curriculum), and the per-prompt rollout budgets
``reinforce_ada`` (rollouts until signal), ``knapsack_rl`` (per-prompt allocation) and
``adaptive_rollout`` (sequential rounds within the step's responses). A
preset this checkout does not register is refused before any run, with the registered ones
listed (``--arms`` picks a subset).

The instrument is ``--experiment`` (default configs/experiments/quick.yaml, the embedded
default: the shipped tiny policy, math/logic/science with logic at half, SGD at 0.02, 16
prompts x 8 samples per step, sampled held-out accuracy on 200 problems per domain x 4
samples) with every arm of a seed paired (same warm start, task pools, sampling noise and
held-out problems), evaluated at the start and the end. Each regime is one harness ``compare``
(`run_compare`) in its own folder under ``--out``: the runs are the harness's (finished ones
are reused on a rerun, interrupted ones resume), its report.md and statistics.csv are written
there, and the verdicts below are that report's (`analysis.analyze`: exact sign-flip test,
Holm over the arms, the corrected bootstrap interval must exclude 0):

- **equal steps**: ``budget.steps`` = ``--steps`` for every arm (folder ``equal_steps-<S>``);
- **equal tokens**: ``budget.generated_tokens`` = ``--tokens`` for every arm: each run stops at
  the first step where its generation cost (`engine/generation_cost_tokens_total`: every
  generated response token, refill rounds and audits included) reaches it, with
  ``budget.steps`` = ``--max-steps`` as a cap (folder ``equal_tokens-<T>``). Default
  ``--tokens``: plain GRPO's mean generation cost over its equal-steps runs of the same
  seeds, rounded to 100 tokens (so the equal-steps runs come first).

The regimes share no runs: a harness run stops at one budget, so even the baseline's run of S
steps and its run of T tokens are two runs (two fingerprints), and a pooled run evaluated at
two points would not be what ``compare`` reports.

Per regime and arm (pooled over seeds; engine runs write the decision log, the source of the
group figures):

- the harness verdict against plain GRPO: effect in points, the corrected interval (Holm's
  level), Holm p, the verdict word ("not enough paired seeds" where the seed count allows no
  verdict, as the report's "n/a (N seeds)");
- the zero-variance share of trained groups (decided groups with a kept response whose
  rewards are all equal) and of generated groups (discarded ones included);
- generated tokens per effective group and effective groups per 1,000 generated tokens (an
  effective group: a trained group whose rewards are not all equal; tokens: the generation
  cost above), and that rate's ratio to plain GRPO's in the same regime (pooled; the range of
  the per-seed paired ratios beside it);
- responses per prompt (per generated group: its non-padding responses in the log) as mean,
  min, max and a histogram, and the mean over steps of every ``dataflex/rollouts/...`` metric
  the runs logged (the per-prompt budget presets' own figures);
- steps and generation cost per run (mean), and runs of the equal-tokens regime that stopped at
  the step cap before the token budget (flagged: not at equal tokens).

Written under ``--out``: next_strategies.csv (one row per regime x arm, pandas-readable) and
next_strategies.md (the table, also printed). ``--trl`` adds a smoke run of every arm through
TRL (``host: trl``, examples/experiments/trl_quick.yaml's settings on the exported tiny
policy; 2 paired seeds, ``--trl-steps`` steps, equal steps only: TRL cannot stop a run at a
token count) with the same harness verdicts and its wall time (folder ``trl-<steps>``).

    .venv/bin/python benchmarks/next_strategies.py [--seeds 0 1 2 3 4 5 6 7] [--steps 120]
        [--tokens N] [--max-steps 360] [--arms ragen_snr maxrl ...] [--workers 2]
        [--out benchmarks/results/next_strategies] [--per-domain N] [--regimes steps tokens]
        [--trl] [--trl-seeds 2] [--trl-steps 20] [--no-progress]

Default size: (1 + 5 arms) x 8 seeds x 2 regimes = 96 engine runs. Measured (2026-12-06, one
worker on the 2-core machine shared with another job): a 120-step run of the instrument with
the decision log cost 46-59 CPU-seconds (plain GRPO 50-52, ragen_snr 46-51, maxrl 53-57,
nemotron_curriculum 57-59, both regimes; a 200-step plain GRPO run 79), so the 96 runs are
about 90 CPU-minutes: ~45 minutes on 2 idle cores with ``--workers 2``, the per-prompt budgets'
extra generation at equal steps on top. 8 seeds are the fewest at which Holm over 5 arms allows
a verdict (5 x 2/2^8 = 0.039 <= 0.05; at 7 seeds 0.078); 120 steps leave ~15 of the 60 minutes
for those budgets and a busy machine. The TRL smoke run (``--trl``: 6 arms x 2 seeds x 20
steps) took 26-55 s per run undisturbed. Needs pandas and pyarrow (the decision log). A
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from bench_common import ROOT, effect_text, num, shown  # noqa: E402

BASELINE = "baseline"
#: the arms, each against plain GRPO (presets; issue 41 items 1-4)
ARMS = (
    "ragen_snr",
    "maxrl",
    "nemotron_curriculum",
    "reinforce_ada",
    "knapsack_rl",
    "adaptive_rollout",
)
#: the metrics the per-prompt budget presets log (printed for any arm that logs them)
RESPONSES_PREFIX = "dataflex/rollouts/"
REGIMES = ("steps", "tokens")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "next_strategies"
#: the TRL smoke run's settings: examples/experiments/trl_quick.yaml's
TRL_EXPERIMENT = ROOT / "examples" / "experiments" / "trl_quick.yaml"

#: next_strategies.csv's columns, in order
COLUMNS = (
    "host regime arm runs seeds steps_mean steps_capped cost_mean score_mean delta "
    "ci_low ci_high ci_level p_holm verdict verdict_possible zv_share_trained "
    "zv_share_generated groups_generated groups_trained groups_effective tokens_per_effective "
    "effective_per_1k effective_per_1k_ratio ratio_seed_min ratio_seed_max "
    "responses_per_prompt_mean responses_per_prompt_min responses_per_prompt_max "
    "responses_histogram responses_metrics cpu_seconds_mean wall_seconds_mean failed"
).split()


def check_arms(arms: list[str] | tuple[str, ...]) -> list[str]:
    """The arms to run, in order without repeats and without the baseline; a preset this
    checkout does not register raises `ConfigError` before any run (listing the registered
    ones: `parse_strategy`'s message)."""
    from dataflex_rl.core.spec import parse_strategy

    out = list(dict.fromkeys(a for a in arms if a != BASELINE))
    for a in out:
        parse_strategy(a, f"--arms {a}")
    return out


def experiment(
    base: dict,
    name: str,
    arms: list[str],
    seeds: list[int],
    steps: int,
    tokens: int | None = None,
    per_domain: int | None = None,
) -> dict:
    """The experiment mapping of one regime: ``base`` (an experiment file's data) with plain
    GRPO and ``arms`` as strategies, ``seeds``, ``steps`` (with ``tokens``: the cap) and the
    token budget, evaluation at the start and the end only, and on the engine one thread per
    run and the decision log on (the group figures' source)."""
    data = {k: v for k, v in base.items() if k not in ("controls", "baseline")}
    data.update(name=name, strategies=[BASELINE, *arms], baseline=BASELINE, seeds=list(seeds))
    budget = {**(base.get("budget") or {}), "steps": steps}
    budget.pop("generated_tokens", None)
    if tokens is not None:
        budget["generated_tokens"] = tokens
    data["budget"] = budget
    evaluation = {**(base.get("evaluation") or {}), "every": 0}
    if per_domain is not None:
        evaluation["per_domain"] = per_domain
    data["evaluation"] = evaluation
    if data.get("host", "engine") == "engine":
        engine = dict(base.get("engine") or {})
        engine["threads"] = 1
        engine["decision_log"] = {**(engine.get("decision_log") or {}), "enabled": True}
        data["engine"] = engine
    return data


def run_figures(run_dir: str | Path) -> dict:
    """One engine run's figures from its folder: ``metrics.jsonl`` (steps, generation cost,
    the ``dataflex/rollouts/...`` metrics) and the decision log (groups and responses)."""
    import pandas as pd

    from dataflex_rl.hosts.common.decision_log import RESPONSES
    from dataflex_rl.hosts.engine.runlog import read_metrics

    run_dir = Path(run_dir)
    # one record per step (a resumed engine run truncates its file; the last record wins)
    train = list({r["step"]: r for r in read_metrics(run_dir) if r.get("kind") == "train"}.values())
    cost = sum(float(r.get("engine/generation_cost_tokens", 0.0)) for r in train)
    responses_metrics: dict[str, list[float]] = {}
    for r in train:
        for k, v in r.items():
            if k.startswith(RESPONSES_PREFIX):
                responses_metrics.setdefault(k, []).append(float(v))
    cols = ["step", "group", "is_padding", "reward", "keep", "discarded"]
    log = pd.read_parquet(run_dir / "decisions" / RESPONSES, columns=cols)
    groups = (
        log[~log["is_padding"]]
        .groupby(["step", "group"], observed=True)
        .agg(
            n=("reward", "size"),
            low=("reward", "min"),
            high=("reward", "max"),
            kept=("keep", "any"),
            discarded=("discarded", "any"),
        )
    )
    zero = groups["low"] == groups["high"]
    trained = groups["kept"] & ~groups["discarded"]
    return {
        "steps": len(train),
        "cost": cost,
        "groups_generated": int(len(groups)),
        "zero_generated": int(zero.sum()),
        "groups_trained": int(trained.sum()),
        "zero_trained": int((trained & zero).sum()),
        "effective": int((trained & ~zero).sum()),
        "responses": dict(Counter(groups["n"].astype(int).tolist())),
        "responses_metrics": {k: sum(v) / len(v) for k, v in responses_metrics.items()},
    }


def _histogram(counts: Counter) -> str:
    """``"8:3200"`` or ``"2:10 4:300 8:12"``: responses per prompt -> generated groups."""
    return " ".join(f"{k}:{counts[k]}" for k in sorted(counts))


def arm_rows(result, exp, host: str, regime: str, figures: dict | None) -> list[dict]:
    """One row per arm of one `run_compare` result: the harness's verdict against plain GRPO
    and, with ``figures`` ({(label, seed): `run_figures`}), the group figures pooled over
    seeds."""
    from dataflex_rl.harness.reporting.narrative import Fmt

    analysis = result.analysis
    fmt = Fmt.of(analysis) if analysis is not None else Fmt(100.0, "points")
    comps = {c.method: c for c in analysis.primary.comparisons} if analysis else {}
    means = {m.method: m.mean for m in analysis.primary.methods} if analysis else {}
    done = {(r["method"], r["seed"]): r for r in result.execution.done}
    failed = result.execution.failed
    base_rate = {}
    if figures:
        for s in exp.seeds:
            f = figures.get((BASELINE, s))
            if f is not None:
                base_rate[s] = bc.ratio(f["effective"], f["cost"])
    rows = []
    for label in exp.labels:
        runs = [done[label, s] for s in exp.seeds if (label, s) in done]
        row: dict = {
            "host": host,
            "regime": regime,
            "arm": label,
            "runs": len(runs),
            "seeds": " ".join(str(r["seed"]) for r in runs),
            "score_mean": means.get(label, math.nan) * fmt.scale,
            "cpu_seconds_mean": bc.mean(
                [r["summary"]["cpu_seconds"] for r in runs if "cpu_seconds" in r["summary"]]
            ),
            "wall_seconds_mean": bc.mean([r["wall_seconds"] for r in runs]),
            "failed": "; ".join(
                f"seed {r['seed']}: {r['error'].splitlines()[0][:200]}"
                for r in failed
                if r["method"] == label
            ),
        }
        if label in comps:
            row.update(bc.comparison_cells(comps[label], fmt.scale))
        elif label == BASELINE and runs:
            row["verdict"] = "(baseline)"
        if figures:
            row.update(_pooled(label, exp, figures, base_rate))
        rows.append(row)
    return rows


def _pooled(label: str, exp, figures: dict, base_rate: dict) -> dict:
    """The group figures of ``label``'s runs, pooled over its seeds."""
    fs = {s: figures[label, s] for s in exp.seeds if (label, s) in figures}
    if not fs:
        return {}
    tot = {
        k: sum(f[k] for f in fs.values())
        for k in (
            "cost",
            "groups_generated",
            "zero_generated",
            "groups_trained",
            "zero_trained",
            "effective",
        )
    }
    counts: Counter = Counter()
    for f in fs.values():
        counts.update(f["responses"])
    n = sum(counts.values())
    rate = bc.ratio(tot["effective"], tot["cost"])
    paired = [s for s in fs if (BASELINE, s) in figures]
    base = bc.ratio(
        sum(figures[BASELINE, s]["effective"] for s in paired),
        sum(figures[BASELINE, s]["cost"] for s in paired),
    )
    seed_ratios = [
        bc.ratio(bc.ratio(f["effective"], f["cost"]), base_rate[s])
        for s, f in fs.items()
        if s in base_rate
    ]
    seed_ratios = [r for r in seed_ratios if math.isfinite(r)]
    metrics: dict[str, list[float]] = {}
    for f in fs.values():
        for k, v in f["responses_metrics"].items():
            metrics.setdefault(k, []).append(v)
    steps = [f["steps"] for f in fs.values()]
    capped = (
        sum(1 for f in fs.values() if f["cost"] < exp.budget.generated_tokens)
        if exp.budget.generated_tokens is not None
        else 0
    )
    return {
        "steps_mean": bc.mean(steps),
        "steps_capped": capped,
        "cost_mean": tot["cost"] / len(fs),
        "zv_share_trained": bc.ratio(tot["zero_trained"], tot["groups_trained"]),
        "zv_share_generated": bc.ratio(tot["zero_generated"], tot["groups_generated"]),
        "groups_generated": tot["groups_generated"],
        "groups_trained": tot["groups_trained"],
        "groups_effective": tot["effective"],
        "tokens_per_effective": bc.ratio(tot["cost"], tot["effective"]),
        "effective_per_1k": 1000 * rate,
        "effective_per_1k_ratio": bc.ratio(rate, base),
        "ratio_seed_min": min(seed_ratios, default=math.nan),
        "ratio_seed_max": max(seed_ratios, default=math.nan),
        "responses_per_prompt_mean": bc.ratio(sum(k * v for k, v in counts.items()), n),
        "responses_per_prompt_min": min(counts, default=math.nan),
        "responses_per_prompt_max": max(counts, default=math.nan),
        "responses_histogram": _histogram(counts),
        "responses_metrics": " ".join(f"{k}={bc.mean(v):.3g}" for k, v in sorted(metrics.items())),
    }


def token_budget(figures: dict, seeds) -> int:
    """Plain GRPO's mean generation cost over its runs of ``seeds``, rounded to 100 tokens."""
    costs = [figures[BASELINE, s]["cost"] for s in seeds if (BASELINE, s) in figures]
    if not costs:
        raise RuntimeError(
            "no finished equal-steps baseline run to take the token budget from; give --tokens"
        )
    return max(100, int(round(sum(costs) / len(costs) / 100.0)) * 100)


def run_regime(data: dict, base: Path, out: Path, workers: int, progress: bool):
    """``(experiment, compare result, {(label, seed): run_figures}, wall seconds)`` of one
    regime's ``compare`` (engine runs: their figures; other hosts: none)."""
    from dataflex_rl.harness.running.compare import run_compare
    from dataflex_rl.harness.running.experiment import parse_experiment
    from dataflex_rl.harness.running.runner import plan

    exp = parse_experiment(data, data["name"], base)
    t0 = time.perf_counter()
    res = run_compare(exp, out, workers=workers, progress=progress, plots=False)
    wall = time.perf_counter() - t0
    figures = None
    if exp.host == "engine":
        done = {(r["method"], r["seed"]) for r in res.execution.done}
        figures = {
            (r.method, r.seed): run_figures(r.out_dir)
            for r in plan(exp, out)
            if (r.method, r.seed) in done
        }
    return exp, res, figures, wall


def render(rows: list[dict], header: list[str]) -> str:
    """The markdown: ``header`` lines, then one table per host (engine: the group figures
    too), then the responses-per-prompt histograms and ``dataflex/rollouts/`` metrics."""
    md = [*header, ""]
    engine = [r for r in rows if r["host"] == "engine"]
    if engine:
        md += [
            "| regime | arm | runs | steps | gen. tokens | score | Δ vs baseline [corrected CI] "
            "| Holm p | verdict | zv share trained | zv share generated | tokens / eff. group "
            "| eff. groups / 1k tokens | ratio to baseline (seeds) | responses / prompt "
            "mean [min, max] |",
            "|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---|---|",
        ]
        for r in engine:
            ratio = num(r.get("effective_per_1k_ratio"), 2)
            if math.isfinite(r.get("ratio_seed_min", math.nan)) and r["arm"] != BASELINE:
                ratio += f" ({r['ratio_seed_min']:.2f}–{r['ratio_seed_max']:.2f})"
            steps = num(r.get("steps_mean"), 1)
            if r.get("steps_capped"):
                steps += f" ({r['steps_capped']} capped)"
            md.append(
                f"| {r['regime']} | {r['arm']} | {r['runs']} | {steps} "
                f"| {num(r.get('cost_mean'), 0)} | {num(r.get('score_mean'))} "
                f"| {effect_text(r)} | {r.get('p_text', '')} | {r.get('verdict', '')} "
                f"| {num(r.get('zv_share_trained'), 3)} "
                f"| {num(r.get('zv_share_generated'), 3)} "
                f"| {num(r.get('tokens_per_effective'))} | {num(r.get('effective_per_1k'), 2)} "
                f"| {ratio} | {num(r.get('responses_per_prompt_mean'), 2)} "
                f"[{num(r.get('responses_per_prompt_min'), 0)}, "
                f"{num(r.get('responses_per_prompt_max'), 0)}] |"
            )
        md.append("")
        uneven = [
            r
            for r in engine
            if r.get("responses_per_prompt_min") != r.get("responses_per_prompt_max")
            or r.get("responses_metrics")
        ]
        if uneven:
            md += [
                "Responses per prompt (responses: generated groups), and the runs' "
                f"`{RESPONSES_PREFIX}` metrics (mean over steps):",
                "",
            ]
            md += [
                f"- {r['regime']} {r['arm']}: {r.get('responses_histogram', '')}"
                + (f"; {r['responses_metrics']}" if r.get("responses_metrics") else "")
                for r in uneven
            ]
            md.append("")
    trl = [r for r in rows if r["host"] == "trl"]
    if trl:
        md += [
            "TRL (smoke run; equal steps):",
            "",
            "| arm | runs | score | Δ vs baseline [corrected CI] | Holm p | verdict "
            "| wall s per run | failed |",
            "|---|---:|---:|---|---:|---|---:|---|",
        ]
        md += [
            f"| {r['arm']} | {r['runs']} | {num(r.get('score_mean'))} | {effect_text(r)} "
            f"| {r.get('p_text', '')} | {r.get('verdict', '')} "
            f"| {num(r.get('wall_seconds_mean'), 0)} | {r.get('failed', '')} |"
            for r in trl
        ]
        md.append("")
    return "\n".join(md)


def trl_experiment(arms: list[str], seeds: int, steps: int, per_domain: int | None) -> dict:
    """trl_quick.yaml's experiment with plain GRPO and ``arms``, ``seeds`` seeds, ``steps``
    steps, evaluated at the start and the end; its Python and exports under the repository."""
    from dataflex_rl.core.spec import load_yaml

    base = load_yaml(TRL_EXPERIMENT)
    base["trl"] = {
        **base["trl"],
        "python": str(ROOT / ".venv-trl" / "bin" / "python"),
        "exports": str(ROOT / "exported"),
    }
    data = experiment(
        base, f"next_strategies_trl_{steps}", arms, list(range(seeds)), steps, None, per_domain
    )
    return data


def benchmark(args) -> tuple[list[dict], list[str]]:
    """Run (or reuse) every regime, then the TRL smoke run when asked; ``(rows, header
    lines)``. Writes nothing but the harness's folders."""
    from dataflex_rl.core.spec import load_yaml

    arms = check_arms(args.arms)
    out = Path(args.out)
    base = load_yaml(Path(args.experiment))
    folder = Path(args.experiment).resolve().parent  # relative paths of the file
    rows: list[dict] = []
    metric = (base.get("evaluation") or {}).get("metric", "greedy")
    header = ["# Next strategies against plain GRPO", ""]
    if args.regimes:
        header.append(
            f"- engine: `{shown(Path(args.experiment))}`, arms {', '.join(arms)} against "
            f"`{BASELINE}`, seeds {' '.join(map(str, args.seeds))}; held-out {metric} "
            "accuracy in points at the end; verdicts: the harness's (Holm over the arms, "
            "corrected interval)"
        )
    steps_figures = None
    if "steps" in args.regimes or (args.tokens is None and "tokens" in args.regimes):
        data = experiment(
            base,
            f"next_strategies_steps{args.steps}",
            arms,
            args.seeds,
            args.steps,
            per_domain=args.per_domain,
        )
        # the token budget needs only the baseline's runs when the steps regime is not asked
        if "steps" not in args.regimes:
            data["strategies"] = [BASELINE]
        exp, res, steps_figures, wall = run_regime(
            data, folder, out / f"equal_steps-{args.steps}", args.workers, args.progress
        )
        if "steps" in args.regimes:
            rows += arm_rows(res, exp, "engine", f"steps {args.steps}", steps_figures)
            header.append(bc.compare_line(f"equal steps ({args.steps})", res, wall))
    if "tokens" in args.regimes:
        tokens = args.tokens
        how = "given"
        if tokens is None:
            tokens = token_budget(steps_figures, args.seeds)
            how = f"plain GRPO's mean cost over {args.steps} steps"
        cap = args.max_steps or 3 * args.steps
        data = experiment(
            base,
            f"next_strategies_tokens{tokens}",
            arms,
            args.seeds,
            cap,
            tokens,
            args.per_domain,
        )
        exp, res, figures, wall = run_regime(
            data, folder, out / f"equal_tokens-{tokens}", args.workers, args.progress
        )
        rows += arm_rows(res, exp, "engine", f"tokens {tokens}", figures)
        header.append(bc.compare_line(f"equal tokens ({tokens}: {how}; step cap {cap})", res, wall))
    if args.trl:
        from dataflex_rl.core.spec import parse_strategy

        # TRL refuses uneven groups up front (rollouts.mode allocate, sequential): those arms
        # are left out
        uneven = ("allocate", "sequential")
        trl_arms = [
            a for a in arms if getattr(parse_strategy(a).rollouts, "mode", "") not in uneven
        ]
        data = trl_experiment(trl_arms, args.trl_seeds, args.trl_steps, args.trl_per_domain)
        exp, res, _, wall = run_regime(
            data, TRL_EXPERIMENT.parent, out / f"trl-{args.trl_steps}", args.workers, args.progress
        )
        rows += arm_rows(res, exp, "trl", f"steps {args.trl_steps}", None)
        header.append(
            bc.compare_line(
                f"TRL smoke run ({args.trl_seeds} seeds x {args.trl_steps} steps, "
                f"{TRL_EXPERIMENT.relative_to(ROOT)}'s settings)",
                res,
                wall,
            )
        )
    return rows, header


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--steps", type=int, default=120, help="the equal-steps budget")
    ap.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="the equal-tokens budget (default: plain GRPO's mean cost over --steps steps)",
    )
    ap.add_argument(
        "--max-steps", type=int, default=None, help="equal tokens: the step cap (3 x --steps)"
    )
    ap.add_argument("--arms", nargs="+", default=list(ARMS), help="presets against baseline")
    ap.add_argument(
        "--regimes",
        nargs="*",
        default=list(REGIMES),
        choices=REGIMES,
        help="engine regimes (none, with --trl: the TRL smoke run alone)",
    )
    ap.add_argument("--experiment", default=str(ROOT / "configs" / "experiments" / "quick.yaml"))
    ap.add_argument("--per-domain", type=int, default=None, help="held-out problems per domain")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--trl", action="store_true", help="also the TRL smoke run")
    ap.add_argument("--trl-seeds", type=int, default=2)
    ap.add_argument("--trl-steps", type=int, default=20)
    ap.add_argument("--trl-per-domain", type=int, default=None)
    ap.add_argument("--no-progress", dest="progress", action="store_false")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return bc.config_errors(lambda: write(args))


def write(args) -> int:
    """Run the benchmark (`benchmark`), print its table and write it under ``--out``."""
    t0 = time.perf_counter()
    rows, header = benchmark(args)
    header.append(f"- total wall {(time.perf_counter() - t0) / 60:.1f} min")
    text = render(rows, header)
    out = Path(args.out)
    bc.write_csv(rows, COLUMNS, out / "next_strategies.csv")
    (out / "next_strategies.md").write_text(text + "\n")
    print(text)
    print(f"written: {out / 'next_strategies.csv'}, {out / 'next_strategies.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
