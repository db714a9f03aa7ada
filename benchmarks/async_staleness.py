"""Data strategies under asynchronous training: staleness k against the synchronous engine,
strategies against plain GRPO at each k, admission's biases, and what an asynchronous step
costs (issue 40, item 7).

The instrument is ``--experiment`` (default configs/experiments/quick.yaml, the embedded
default: the shipped tiny policy, math/logic/science with logic at half, SGD at 0.02, 16
prompts x 8 samples per step, sampled held-out accuracy on 200 problems per domain x 4
samples), every run stopped at **equal generated tokens** (``budget.generated_tokens`` =
``--tokens``: the first step at which its generation cost, `engine/generation_cost_tokens_total`,
reaches it; ``budget.steps`` = ``--max-steps`` as a cap), evaluated at the start and the end,
one thread per run. Every arm of a seed is paired (same warm start, task pools, sampling noise
and held-out problems). The engine's ``asynchronous.staleness`` k is each arm's own engine
setting (the harness's per-arm overrides, as its control arms set ``optim.lr``).

All runs are one harness ``compare`` (`run_compare`) in ``--out``/equal_tokens-<T>: finished
runs are reused on a rerun, interrupted ones resume; its own report.md (every arm against
``baseline-k0``, Holm over all of them) is a by-product. Each (strategy, k, seed) runs once and
serves both verdict families below, which the harness's analysis (`analysis.analyze`: exact
sign-flip test, Holm within the family, the corrected bootstrap interval must exclude 0)
computes on the compare's results rows, relabelled per family:

1. **grid**: k in ``--ks`` (0 1 2 4) x ``--strategies`` (baseline dapo difffilter dump_ucb),
   arm ``<strategy>-k<k>``. Per strategy, each k against k = 0 (Holm over the other k's); per
   k, each strategy against ``baseline`` at that k (Holm over the other strategies). Beside the
   verdicts: steps, generation cost, held-out score, the trained groups' staleness (mean of the
   per-step mean, max) and the truncated importance weight (`engine/async_is_weight_mean`).
2. **admission** at k = ``--admission-k`` (4) on plain GRPO: no admission (``baseline-k4``,
   the grid's run), ``drop-k4`` and ``pace-k4`` (``admission: {max_staleness:
   --max-staleness, past: drop|pace}``). Per arm, pooled over seeds: mean response length and
   solve rate of the trained groups against the generated ones (`dataflex/async/trained_*`,
   `generated_*`, each the mean over steps, then over seeds), each domain's realized share of
   trained groups (`dataflex/async/domain/<d>/share_total` at the last step, mean over seeds)
   against its target and the largest absolute gap in points over domains and runs,
   starvation (the largest `starved_steps`), groups dropped per run. No verdicts.
3. **cost** (in this process, not through the harness): plain GRPO on the instrument for
   ``--cost-steps`` steps at each k in ``--ks``, same seeds (``--cost-seeds``); per seed one
   trainer per k, stepped in turn (step i of every k before step i + 1 of any, the order
   rotated each step, so that the machine's load falls on every k alike); CPU time
   (`time.process_time`) of every ``train_step``. Per k: CPU ms per step over the
   steady steps (from max(k) + 1 on, the same window for every k) and over the first max(k) + 1
   steps (step 0 of an asynchronous run generates k + 1 batches: the queue's fill), each as a
   ratio to k = 0 (pooled; per-seed range beside), wall time per steady step too. The issue's
   target: an asynchronous step costs at most 1.1x a synchronous one.

Written under ``--out``: async_staleness_grid.csv, async_staleness_admission.csv,
async_staleness_cost.csv (pandas-readable, one row per arm / k) and async_staleness.md (the
tables, also printed).

    .venv/bin/python benchmarks/async_staleness.py [--full] [--seeds 0 1 ... 7]
        [--tokens N] [--max-steps N] [--ks 0 1 2 4] [--strategies baseline dapo ...]
        [--parts grid admission cost] [--cost] [--admission-k 4] [--max-staleness 2]
        [--cost-seeds 0 1] [--cost-steps 60] [--per-domain N] [--workers 2]
        [--out benchmarks/results/async_staleness] [--no-progress]

Default size (`DEFAULT_TOKENS`, `DEFAULT_MAX_STEPS`): 4 k x 4 strategies x 8 seeds = 128
grid runs + 2 admission arms x 8 seeds = 16 (the no-admission arm is the grid's) = 144 runs,
each stopped at 56,000 generated tokens (68 steps of plain GRPO at k = 0, 44 of dapo), and the
cost part (2 seeds x 60 steps x 4 k). Measured (2026-12-06, one worker on the 2-core machine
shared with other jobs): one seed's 18 runs cost 607 CPU-seconds (23-42 per run, 33.7 on
average), so the 144 runs are ~81 CPU-minutes: ~41 minutes with ``--workers 2`` on 2 idle
cores, the cost part 3-4 minutes on top (benchmarks/results/async_staleness.md).
``--full``: 160,000 tokens (~200 steps of plain GRPO), cap 600 steps, ``--cost-steps 200``:
about 2 hours. Each verdict family holds 3 comparisons: 7 paired seeds are the fewest at
which Holm allows a verdict (3 x 2/2^7 = 0.047 <= 0.05), the default's 8 (the issue's
minimum) bring the floor to 0.023. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from bench_common import ROOT, effect_text, num, shown  # noqa: E402

BASELINE = "baseline"
KS = (0, 1, 2, 4)
STRATEGIES = ("baseline", "dapo", "difffilter", "dump_ucb")
PARTS = ("grid", "admission", "cost")
PASTS = ("drop", "pace")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "async_staleness"
DEFAULT_EXPERIMENT = ROOT / "configs" / "experiments" / "quick.yaml"
#: the default's token budget (68 steps of plain GRPO at k = 0: ~41 min on 2 cores) and its cap
DEFAULT_TOKENS, DEFAULT_MAX_STEPS, DEFAULT_COST_STEPS = 56_000, 210, 60
#: ``--full``: about 200 steps of plain GRPO at k = 0
FULL_TOKENS, FULL_MAX_STEPS, FULL_COST_STEPS = 160_000, 600, 200

ASYNC = "dataflex/async/"
DOMAIN = ASYNC + "domain/"
ADMISSION = "dataflex/admission/"
IS_WEIGHT = "engine/async_is_weight_mean"
#: per-step metrics averaged over steps (each run's mean, then the mean over runs)
STEP_MEANS = {
    "staleness_mean": ASYNC + "staleness_mean",
    "trained_length": ASYNC + "trained_length",
    "generated_length": ASYNC + "generated_length",
    "trained_solve_rate": ASYNC + "trained_solve_rate",
    "generated_solve_rate": ASYNC + "generated_solve_rate",
    "is_weight_mean": IS_WEIGHT,
    "paused_domains": ADMISSION + "paused_domains",
}

VERDICT_CELLS = "delta ci_low ci_high ci_level p p_holm p_holm_all verdict verdict_possible".split()
#: async_staleness_grid.csv's columns, in order
GRID_COLUMNS = (
    "strategy k label runs seeds steps_mean steps_capped cost_mean score_mean staleness_mean "
    "staleness_max is_weight_mean cpu_seconds_mean wall_seconds_mean failed".split()
    + [f"vs_k0_{c}" for c in VERDICT_CELLS]
    + [f"vs_baseline_{c}" for c in VERDICT_CELLS]
)
#: async_staleness_admission.csv's columns (then share_<d>, target_<d>, gap_<d> per domain)
ADMISSION_COLUMNS = (
    "arm label k max_staleness runs seeds steps_mean steps_capped cost_mean score_mean "
    "staleness_mean staleness_max trained_length generated_length trained_solve_rate "
    "generated_solve_rate max_gap_points starved_max dropped_per_run requeued_last_mean "
    "paused_domains cpu_seconds_mean failed"
).split()
#: async_staleness_cost.csv's columns
COST_COLUMNS = (
    "k seeds steps steady_from steady_cpu_ms ratio ratio_seed_min ratio_seed_max "
    "first_cpu_ms first_ratio steady_wall_ms wall_ratio load_before load_after"
).split()


def label(strategy: str, k: int) -> str:
    """The arm of ``strategy`` at staleness ``k``: ``dapo-k2``."""
    return f"{strategy}-k{k}"


def admission_label(past: str, k: int) -> str:
    """The admission arm ``drop-k4`` / ``pace-k4`` (plain GRPO with ``admission``)."""
    return f"{past}-k{k}"


def check_strategies(strategies) -> list[str]:
    """``baseline`` first, then the others in order without repeats; a preset this checkout
    does not register raises `ConfigError` before any run."""
    from dataflex_rl.core.spec import parse_strategy

    out = [BASELINE] + [s for s in dict.fromkeys(strategies) if s != BASELINE]
    for s in out:
        parse_strategy(s, f"--strategies {s}")
    return out


def experiment_data(
    base: dict,
    name: str,
    arms: list[tuple[str, object]],
    seeds: list[int],
    tokens: int | None,
    max_steps: int,
    per_domain: int | None = None,
) -> dict:
    """The experiment mapping: ``base`` (an experiment file's data) with ``arms`` [(label,
    strategy: preset name or mapping)], ``seeds``, the token budget (None: none) with
    ``max_steps`` as the cap, evaluation at the start and the end only, one thread per run."""
    data = {k: v for k, v in base.items() if k not in ("controls", "baseline")}
    data.update(
        name=name,
        strategies=[{"label": lab, "strategy": s} for lab, s in arms],
        seeds=list(seeds),
    )
    labels = [lab for lab, _ in arms]
    data["baseline"] = label(BASELINE, 0) if label(BASELINE, 0) in labels else labels[0]
    budget = {**(base.get("budget") or {}), "steps": max_steps}
    budget.pop("generated_tokens", None)
    if tokens is not None:
        budget["generated_tokens"] = tokens
    data["budget"] = budget
    evaluation = {**(base.get("evaluation") or {}), "every": 0}
    if per_domain is not None:
        evaluation["per_domain"] = per_domain
    data["evaluation"] = evaluation
    engine = dict(base.get("engine") or {})
    engine["threads"] = 1
    engine.pop("asynchronous", None)  # each arm sets its own
    data["engine"] = engine
    return data


def arms_of(
    strategies: list[str], ks: list[int], parts, admission_k: int, max_staleness: int
) -> tuple[list[tuple[str, object]], dict[str, int]]:
    """``([(label, strategy)], {label: k})``: the grid's arms (when ``grid`` is in
    ``parts``), and with ``admission`` plain GRPO at ``admission_k`` without admission and
    with each of `PASTS`."""
    arms: list[tuple[str, object]] = []
    k_of: dict[str, int] = {}
    if "grid" in parts:
        for k in ks:
            for s in strategies:
                arms.append((label(s, k), s))
                k_of[label(s, k)] = k
    if "admission" in parts:
        if label(BASELINE, admission_k) not in k_of:
            arms.append((label(BASELINE, admission_k), BASELINE))
            k_of[label(BASELINE, admission_k)] = admission_k
        for past in PASTS:
            spec = {
                "name": f"admission_{past}",
                "description": f"plain GRPO, max_staleness {max_staleness}, past: {past}",
                "admission": {"max_staleness": max_staleness, "past": past},
            }
            arms.append((admission_label(past, admission_k), spec))
            k_of[admission_label(past, admission_k)] = admission_k
    return arms, k_of


def build_experiment(data: dict, k_of: dict[str, int], base: Path):
    """The parsed experiment with each arm's ``asynchronous.staleness`` as its own engine
    setting (`StrategyEntry.overrides`), every arm's settings validated now."""
    from dataflex_rl.harness.running.experiment import parse_experiment

    exp = parse_experiment(data, data["name"], base)
    entries = tuple(
        dataclasses.replace(e, overrides={"asynchronous": {"staleness": k_of[e.label]}})
        for e in exp.strategies
    )
    exp = dataclasses.replace(exp, strategies=entries)
    for e in exp.strategies:
        exp.host_impl.run_config(exp, e.overrides)
    return exp


# ------------------------------------------------------------------ figures of one run


def run_figures(run_dir: str | Path) -> dict:
    """One engine run's figures from its ``metrics.jsonl``: steps, generation cost, the mean
    over steps of each `STEP_MEANS` metric it logged, the largest staleness and starvation,
    the groups admission dropped (summed), the prompts waiting to be drawn again at the last
    step, and each domain's share of trained groups and target at the last step."""
    from dataflex_rl.hosts.engine.runlog import read_metrics

    # one record per step (a resumed engine run truncates its file; the last record wins)
    by_step = {r["step"]: r for r in read_metrics(Path(run_dir)) if r.get("kind") == "train"}
    train = [by_step[s] for s in sorted(by_step)]
    out: dict = {
        "steps": len(train),
        "cost": sum(float(r.get("engine/generation_cost_tokens", 0.0)) for r in train),
    }
    for name, key in STEP_MEANS.items():
        xs = [float(r[key]) for r in train if key in r]
        out[name] = sum(xs) / len(xs) if xs else math.nan
    stale = [float(r[ASYNC + "staleness_max"]) for r in train if ASYNC + "staleness_max" in r]
    out["staleness_max"] = max(stale, default=math.nan)
    dropped = [float(r[ADMISSION + "dropped"]) for r in train if ADMISSION + "dropped" in r]
    out["dropped"] = sum(dropped) if dropped else math.nan
    requeued = [float(r[ADMISSION + "requeued"]) for r in train if ADMISSION + "requeued" in r]
    out["requeued_last"] = requeued[-1] if requeued else math.nan
    shares: dict[str, float] = {}
    targets: dict[str, float] = {}
    starved: dict[str, float] = {}
    for r in train:
        for key, v in r.items():
            if not key.startswith(DOMAIN):
                continue
            domain, _, what = key[len(DOMAIN) :].rpartition("/")
            if what == "starved_steps":
                starved[domain] = max(starved.get(domain, 0.0), float(v))
    if train:
        last = train[-1]
        for key, v in last.items():
            if key.startswith(DOMAIN):
                domain, _, what = key[len(DOMAIN) :].rpartition("/")
                if what == "share_total":
                    shares[domain] = float(v)
                elif what == "target":
                    targets[domain] = float(v)
    out["shares"], out["targets"], out["starved"] = shares, targets, starved
    return out


def pooled(figures: list[dict], tokens: int | None) -> dict:
    """The figures of an arm's runs (`run_figures` of each seed) pooled: means over runs,
    the largest staleness and starvation, dropped groups per run, runs stopped at the step
    cap before ``tokens`` (``steps_capped``), each domain's mean share and target, and the
    largest absolute gap between a run's share and its target, in points (``max_gap_points``;
    per domain ``gap_<d>``)."""
    if not figures:
        return {}
    out: dict = {
        "steps_mean": bc.mean([f["steps"] for f in figures]),
        "cost_mean": bc.mean([f["cost"] for f in figures]),
        "steps_capped": sum(1 for f in figures if tokens is not None and f["cost"] < tokens),
        "staleness_max": max((f["staleness_max"] for f in figures), default=math.nan),
        "dropped_per_run": bc.mean([f["dropped"] for f in figures]),
        "requeued_last_mean": bc.mean([f["requeued_last"] for f in figures]),
    }
    for name in STEP_MEANS:
        out[name] = bc.mean([f[name] for f in figures])
    domains = list(dict.fromkeys(d for f in figures for d in f["shares"]))
    gaps = []
    for d in domains:
        runs = [f for f in figures if d in f["shares"] and d in f["targets"]]
        out[f"share_{d}"] = bc.mean([f["shares"][d] for f in runs])
        out[f"target_{d}"] = bc.mean([f["targets"][d] for f in runs])
        gap = max((100 * abs(f["shares"][d] - f["targets"][d]) for f in runs), default=math.nan)
        out[f"gap_{d}"] = gap
        gaps.append(gap)
    out["domains"] = domains
    out["max_gap_points"] = max(gaps, default=math.nan)
    starved = [v for f in figures for v in f["starved"].values()]
    out["starved_max"] = max(starved, default=math.nan)
    return out


# ------------------------------------------------------------------ verdicts


def family_verdicts(rows, members: dict[str, tuple], reference: str, options) -> dict[str, dict]:
    """The harness's verdicts within families of arms: ``members`` maps an arm's label to
    ``(family, name)``; in each family every name is compared with ``reference`` (Holm over
    the family), on ``rows`` (the compare's results rows, relabelled). Returns {label:
    `bench_common.comparison_cells`} for the arms compared (not the reference's, not a family without
    the reference's runs)."""
    from dataflex_rl.harness.statistics.analysis import analyze
    from dataflex_rl.harness.statistics.results import scores_are_fractions

    scale = 100.0 if scores_are_fractions(r.score for r in rows) else 1.0
    out: dict[str, dict] = {}
    for family in dict.fromkeys(f for f, _ in members.values()):
        names = {lab: n for lab, (f, n) in members.items() if f == family}
        sub = [dataclasses.replace(r, method=names[r.method]) for r in rows if r.method in names]
        if reference not in {r.method for r in sub} or len({r.method for r in sub}) < 2:
            continue
        comps = {c.method: c for c in analyze(sub, reference, options).primary.comparisons}
        for lab, n in names.items():
            if n in comps:
                out[lab] = bc.comparison_cells(comps[n], scale)
    return out


def grid_rows(res, exp, strategies, ks, figures: dict) -> list[dict]:
    """One row per (strategy, k): the runs' figures pooled over seeds and both verdict
    families (``vs_k0_*``: against the same strategy at k = 0; ``vs_baseline_*``: against
    plain GRPO at the same k)."""
    rows = res.rows
    by_k = {label(s, k): (s, f"k{k}") for s in strategies for k in ks}
    by_s = {label(s, k): (f"k{k}", s) for s in strategies for k in ks}
    vs_k0 = family_verdicts(rows, by_k, "k0", exp.statistics)
    vs_base = family_verdicts(rows, by_s, BASELINE, exp.statistics)
    out = []
    for k in ks:
        for s in strategies:
            lab = label(s, k)
            row = {"strategy": s, "k": k, "label": lab}
            row.update(_arm_common(res, exp, lab, figures))
            for prefix, cells in (("vs_k0_", vs_k0.get(lab)), ("vs_baseline_", vs_base.get(lab))):
                if cells:
                    row.update({prefix + c: v for c, v in cells.items()})
            if k == 0:
                row["vs_k0_verdict"] = "(reference)"
            if s == BASELINE:
                row["vs_baseline_verdict"] = "(reference)"
            out.append(row)
    for prefix in ("vs_k0_", "vs_baseline_"):
        holm_across(out, prefix)
    return out


def holm_across(rows: list[dict], prefix: str) -> None:
    """Holm over every comparison under ``prefix`` in ``rows`` at once (all families
    together, on the raw ``<prefix>p``), written as ``<prefix>p_holm_all``: what a reader who
    counts every comparison of the table as one family would apply."""
    from dataflex_rl.harness.statistics.stats import holm

    have = [r for r in rows if isinstance(r.get(prefix + "p"), float)]
    if not have:
        return
    adjusted, _ = holm([r[prefix + "p"] for r in have])
    for r, a in zip(have, adjusted.tolist()):
        r[prefix + "p_holm_all"] = a


def _smallest_across(rows: list[dict], prefix: str, what: str) -> str:
    """The comparison under ``prefix`` with the smallest raw p, with its Holm p over the whole
    column (`holm_across`), in words; "" where there is none."""
    from dataflex_rl.harness.reporting.narrative import pvalue

    have = [r for r in rows if math.isfinite(r.get(prefix + "p_holm_all", math.nan))]
    if not have:
        return ""
    r = min(have, key=lambda r: r[prefix + "p"])
    return (
        f"{what} ({len(have)} comparisons): smallest raw p {r['strategy']} at k = {r['k']}, "
        f"{pvalue(r[prefix + 'p'])}, Holm over all {len(have)} {pvalue(r[prefix + 'p_holm_all'])}"
    )


def admission_rows(res, exp, admission_k: int, max_staleness: int, figures: dict) -> list[dict]:
    """One row per admission arm (none, then `PASTS`) at ``admission_k``."""
    out = []
    for arm, lab, limit in [("none", label(BASELINE, admission_k), "")] + [
        (p, admission_label(p, admission_k), max_staleness) for p in PASTS
    ]:
        row = {"arm": arm, "label": lab, "k": admission_k, "max_staleness": limit}
        row.update(_arm_common(res, exp, lab, figures))
        out.append(row)
    return out


def _arm_common(res, exp, lab: str, figures: dict) -> dict:
    from dataflex_rl.harness.reporting.narrative import Fmt

    analysis = res.analysis
    fmt = Fmt.of(analysis) if analysis is not None else Fmt(100.0, "points")
    means = {m.method: m.mean for m in analysis.primary.methods} if analysis else {}
    done = {(r["method"], r["seed"]): r for r in res.execution.done}
    runs = [done[lab, s] for s in exp.seeds if (lab, s) in done]
    fs = [figures[lab, s] for s in exp.seeds if (lab, s) in figures]
    return {
        "runs": len(runs),
        "seeds": " ".join(str(r["seed"]) for r in runs),
        "score_mean": means.get(lab, math.nan) * fmt.scale,
        "cpu_seconds_mean": bc.mean(
            [r["summary"]["cpu_seconds"] for r in runs if "cpu_seconds" in r["summary"]]
        ),
        "wall_seconds_mean": bc.mean([r["wall_seconds"] for r in runs]),
        "failed": "; ".join(
            f"seed {r['seed']}: {r['error'].splitlines()[0][:200]}"
            for r in res.execution.failed
            if r["method"] == lab
        ),
        **pooled(fs, exp.budget.generated_tokens),
    }


# ------------------------------------------------------------------ cost


def cost_rows(cpu: dict, wall: dict, ks, steady_from: int, load=(math.nan, math.nan)) -> list:
    """One row per k from per-step times: ``cpu`` / ``wall`` {(k, seed): [seconds per step]}.
    Steady: steps ``steady_from`` on; first: the steps before; ratios to k = 0 pooled over
    seeds (sum over sum), with the range of the per-seed ratios."""

    def per_step(xs: list[float], lo: int, hi: int | None) -> tuple[float, int]:
        part = xs[lo:hi]
        return sum(part), len(part)

    seeds = sorted({s for _, s in cpu})
    out = []
    base = {s: per_step(cpu[0, s], steady_from, None) for s in seeds if (0, s) in cpu}
    base_first = [per_step(cpu[0, s], 0, steady_from) for s in seeds if (0, s) in cpu]
    base_wall = [per_step(wall[0, s], steady_from, None) for s in seeds if (0, s) in wall]

    def rate(parts) -> float:
        n = sum(c for _, c in parts)
        return sum(t for t, _ in parts) / n if n else math.nan

    b, bf, bw = rate(base.values()), rate(base_first), rate(base_wall)
    for k in ks:
        have = [s for s in seeds if (k, s) in cpu]
        steady = {s: per_step(cpu[k, s], steady_from, None) for s in have}
        first = [per_step(cpu[k, s], 0, steady_from) for s in have]
        walls = [per_step(wall[k, s], steady_from, None) for s in have if (k, s) in wall]
        seed_ratios = [
            bc.ratio(rate([steady[s]]), rate([base[s]])) for s in have if s in base and base[s][1]
        ]
        r = rate(steady.values())
        out.append(
            {
                "k": k,
                "seeds": " ".join(map(str, have)),
                "steps": bc.mean([len(cpu[k, s]) for s in have]),
                "steady_from": steady_from,
                "steady_cpu_ms": 1000 * r,
                "ratio": bc.ratio(r, b),
                "ratio_seed_min": min(seed_ratios, default=math.nan),
                "ratio_seed_max": max(seed_ratios, default=math.nan),
                "first_cpu_ms": 1000 * rate(first),
                "first_ratio": bc.ratio(rate(first), bf),
                "steady_wall_ms": 1000 * rate(walls),
                "wall_ratio": bc.ratio(rate(walls), bw),
                "load_before": load[0],
                "load_after": load[1],
            }
        )
    return out


def measure_cost(exp, ks, seeds, steps: int, progress: bool = True) -> tuple[dict, dict]:
    """Per-step CPU and wall seconds of plain GRPO at each k: ``({(k, seed): [cpu s]},
    {(k, seed): [wall s]})``. Per seed, one trainer per k, stepped in turn (step i of every k
    before step i + 1 of any, the order of ``ks`` rotated each step), so that a change in
    the machine's load falls on every k alike."""
    from dataflex_rl.core.spec import parse_strategy
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    host = exp.host_impl
    cpu: dict = {}
    wall: dict = {}
    spec = parse_strategy(BASELINE)
    ks = list(ks)
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            trainers = {}
            for k in ks:
                cfg = host.engine_config(exp, {"asynchronous": {"staleness": k}})
                trainers[k] = EmbeddedTrainer(cfg, spec, seed=seed, out_dir=Path(tmp) / f"k{k}")
                cpu[k, seed], wall[k, seed] = [], []
            for i in range(steps):
                for k in ks[i % len(ks) :] + ks[: i % len(ks)]:
                    c0, w0 = time.process_time(), time.perf_counter()
                    trainers[k].train_step()
                    cpu[k, seed].append(time.process_time() - c0)
                    wall[k, seed].append(time.perf_counter() - w0)
            for tr in trainers.values():
                tr.driver.close()
        if progress:
            print(
                f"cost: seed {seed}: {steps} steps; CPU-s per k: "
                + ", ".join(f"k={k} {sum(cpu[k, seed]):.1f}" for k in ks),
                file=sys.stderr,
                flush=True,
            )
    return cpu, wall


# ------------------------------------------------------------------ rendering


def render_grid(rows: list[dict]) -> list[str]:
    md = [
        "| strategy | k | runs | steps | gen. tokens | score | staleness mean (max) "
        "| IS weight | Δ vs k=0 [corrected CI] | Holm p | verdict vs k=0 "
        "| Δ vs baseline [corrected CI] | Holm p | verdict vs baseline | CPU s / run |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---|---|---:|---|---:|",
    ]
    for r in rows:
        steps = num(r.get("steps_mean"), 1)
        if r.get("steps_capped"):
            steps += f" ({r['steps_capped']} capped)"
        stale = "—" if r["k"] == 0 else _stale(r)
        md.append(
            f"| {r['strategy']} | {r['k']} | {r['runs']} | {steps} | {num(r.get('cost_mean'), 0)} "
            f"| {num(r.get('score_mean'))} | {stale} "
            f"| {'—' if r['k'] == 0 else num(r.get('is_weight_mean'), 3)} "
            f"| {effect_text(r, 'vs_k0_')} | {r.get('vs_k0_p_text', '')} | {r.get('vs_k0_verdict', '')} "
            f"| {effect_text(r, 'vs_baseline_')} | {r.get('vs_baseline_p_text', '')} "
            f"| {r.get('vs_baseline_verdict', '')} | {num(r.get('cpu_seconds_mean'), 0)} |"
        )
    across = [
        line
        for line in (
            _smallest_across(rows, "vs_k0_", "against k = 0"),
            _smallest_across(rows, "vs_baseline_", "against plain GRPO"),
        )
        if line
    ]
    if across:
        md += ["", "Every family together (Holm over the whole column): " + "; ".join(across) + "."]
    failed = [f"- {r['label']}: {r['failed']}" for r in rows if r.get("failed")]
    return md + ([""] + ["Failed runs:", *failed] if failed else [])


def _stale(r: dict) -> str:
    return f"{num(r.get('staleness_mean'), 2)} ({num(r.get('staleness_max'), 0)})"


def render_admission(rows: list[dict]) -> list[str]:
    domains = list(dict.fromkeys(d for r in rows for d in r.get("domains", [])))
    md = [
        "| admission | runs | steps | gen. tokens | score | staleness mean (max) "
        "| trained / generated length | trained / generated solve rate "
        + "".join(f"| {d} share (target) " for d in domains)
        + "| max gap (points) | max starved steps | dropped / run |",
        "|---|---:|---:|---:|---:|---|---|---|" + "---:|" * len(domains) + "---:|---:|---:|",
    ]
    for r in rows:
        what = (
            r["arm"] if r["arm"] == "none" else f"{r['arm']} (max_staleness {r['max_staleness']})"
        )
        shares = "".join(
            f"| {num(r.get(f'share_{d}'), 3)} ({num(r.get(f'target_{d}'), 3)}) " for d in domains
        )
        md.append(
            f"| {what} | {r['runs']} | {num(r.get('steps_mean'), 1)} "
            f"| {num(r.get('cost_mean'), 0)} | {num(r.get('score_mean'))} | {_stale(r)} "
            f"| {num(r.get('trained_length'), 2)} / {num(r.get('generated_length'), 2)} "
            f"| {num(r.get('trained_solve_rate'), 3)} / {num(r.get('generated_solve_rate'), 3)} "
            f"{shares}| {num(r.get('max_gap_points'), 2)} | {num(r.get('starved_max'), 0)} "
            f"| {num(r.get('dropped_per_run'), 1)} |"
        )
    failed = [f"- {r['label']}: {r['failed']}" for r in rows if r.get("failed")]
    return md + ([""] + ["Failed runs:", *failed] if failed else [])


def render_cost(rows: list[dict]) -> list[str]:
    md = [
        "| k | seeds | steps | CPU ms / step (steady) | ratio to k=0 (seeds) "
        "| CPU ms / step (first steps) | ratio | wall ratio (steady) |",
        "|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = num(r["ratio"], 3)
        if r["k"] != 0 and math.isfinite(r["ratio_seed_min"]):
            ratio += f" ({r['ratio_seed_min']:.3f}–{r['ratio_seed_max']:.3f})"
        md.append(
            f"| {r['k']} | {r['seeds']} | {num(r['steps'], 0)} | {num(r['steady_cpu_ms'], 1)} "
            f"| {ratio} | {num(r['first_cpu_ms'], 1)} | {num(r['first_ratio'], 2)} "
            f"| {num(r['wall_ratio'], 3)} |"
        )
    return md


# ------------------------------------------------------------------ the benchmark


def benchmark(args) -> tuple[dict[str, list[dict]], list[str]]:
    """Run (or reuse) the parts asked for; ``({part: rows}, header lines)``. Writes nothing
    but the harness's folder."""
    from dataflex_rl.core.spec import load_yaml
    from dataflex_rl.harness.running.compare import pairing_check, run_compare
    from dataflex_rl.harness.running.runner import plan

    strategies = check_strategies(args.strategies)
    ks = sorted(set(args.ks) | {0})
    parts = args.parts
    out = Path(args.out)
    base = load_yaml(Path(args.experiment))
    folder = Path(args.experiment).resolve().parent
    metric = (base.get("evaluation") or {}).get("metric", "greedy")
    header = ["# Data strategies under asynchronous training", ""]
    if "grid" in parts or "admission" in parts:
        header.append(
            f"- instrument: `{shown(Path(args.experiment))}`, every run stopped at "
            f"{args.tokens} generated tokens (step cap {args.max_steps}); held-out {metric} "
            "accuracy in points at the end"
        )
    else:
        header.append(f"- instrument: `{shown(Path(args.experiment))}`")
    result: dict[str, list[dict]] = {}
    if "cost" in parts:
        data = experiment_data(
            base, "async_staleness_cost", [(label(BASELINE, 0), BASELINE)], [0], None,
            args.cost_steps, args.per_domain,
        )  # fmt: skip
        exp = build_experiment(data, {label(BASELINE, 0): 0}, folder)
        load0, t0 = bc.load_average(), time.perf_counter()
        cpu, wall = measure_cost(exp, ks, args.cost_seeds, args.cost_steps, args.progress)
        load = (load0, bc.load_average())
        steady_from = max(ks) + 1
        result["cost"] = cost_rows(cpu, wall, ks, steady_from, load)
        header.append(
            f"- cost: plain GRPO, {args.cost_steps} steps per k, seeds "
            f"{' '.join(map(str, args.cost_seeds))}, in this process; steady steps from step "
            f"{steady_from}; {(time.perf_counter() - t0) / 60:.1f} min wall; load average "
            f"{load[0]:.2f} before, {load[1]:.2f} after"
        )
    if "grid" in parts or "admission" in parts:
        arms, k_of = arms_of(strategies, ks, parts, args.admission_k, args.max_staleness)
        data = experiment_data(
            base, f"async_staleness_{args.tokens}", arms, args.seeds, args.tokens,
            args.max_steps, args.per_domain,
        )  # fmt: skip
        exp = build_experiment(data, k_of, folder)
        t0 = time.perf_counter()
        res = run_compare(
            exp, out / f"equal_tokens-{args.tokens}", workers=args.workers,
            progress=args.progress, plots=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        done = {(r["method"], r["seed"]) for r in res.execution.done}
        figures = {
            (r.method, r.seed): run_figures(r.out_dir)
            for r in plan(exp, res.out_dir)
            if (r.method, r.seed) in done
        }
        ex = res.execution
        cpu_min = sum(r["summary"].get("cpu_seconds", 0.0) for r in ex.done) / 60
        header.append(
            f"- runs: {len(ex.done)} done ({ex.skipped} reused), {len(ex.failed)} failed; "
            f"{wall / 60:.1f} min wall for this invocation, {cpu_min:.1f} CPU-min in the runs "
            f"(`cpu_seconds`; a reused run counts its own); seeds "
            f"{' '.join(map(str, args.seeds))}; harness report `{shown(res.out_dir)}/report.md`; "
            f"{pairing_check(ex)}"
        )
        if "grid" in parts:
            result["grid"] = grid_rows(res, exp, strategies, ks, figures)
        if "admission" in parts:
            result["admission"] = admission_rows(
                res, exp, args.admission_k, args.max_staleness, figures
            )
    return result, header


def render(result: dict[str, list[dict]], header: list[str]) -> str:
    md = [*header, ""]
    if "grid" in result:
        md += [
            "## Staleness x strategy (equal generated tokens)",
            "",
            "Verdicts: the harness's, each k against k = 0 for the same strategy (Holm over "
            "the k's) and each strategy against plain GRPO at the same k (Holm over the "
            "strategies); staleness: of the trained groups (mean of the per-step mean, max).",
            "",
            *render_grid(result["grid"]),
            "",
        ]
    if "admission" in result:
        md += [
            "## Admission at k = " + str(result["admission"][0]["k"]),
            "",
            "Plain GRPO. Length and solve rate: trained groups / generated ones (mean over "
            "steps, then seeds); shares: of trained groups at the last step (mean over "
            "seeds, target in parentheses); max gap: the largest |share - target| over "
            "domains and runs.",
            "",
            *render_admission(result["admission"]),
            "",
        ]
    if "cost" in result:
        md += [
            "## Cost of an asynchronous step (CPU time, plain GRPO)",
            "",
            "Steady: steps from max(k) + 1 on; first steps: the ones before (step 0 of an "
            "asynchronous run generates k + 1 batches). Target: ratio <= 1.1.",
            "",
            *render_cost(result["cost"]),
            "",
        ]
    return "\n".join(md)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full grid's budgets (~200 steps)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--tokens", type=int, default=None, help="generated tokens per run")
    ap.add_argument("--max-steps", type=int, default=None, help="step cap of a run")
    ap.add_argument("--ks", type=int, nargs="+", default=list(KS), help="staleness (0 added)")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--cost", action="store_true", help="the cost part only (--parts cost)")
    ap.add_argument("--admission-k", type=int, default=4)
    ap.add_argument("--max-staleness", type=int, default=2)
    ap.add_argument("--cost-seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cost-steps", type=int, default=None)
    ap.add_argument("--experiment", default=str(DEFAULT_EXPERIMENT))
    ap.add_argument("--per-domain", type=int, default=None, help="held-out problems per domain")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--no-progress", dest="progress", action="store_false")
    args = ap.parse_args(argv)
    if args.cost:
        args.parts = ["cost"]
    full = args.full
    if args.tokens is None:
        args.tokens = FULL_TOKENS if full else DEFAULT_TOKENS
    if args.max_steps is None:
        args.max_steps = FULL_MAX_STEPS if full else DEFAULT_MAX_STEPS
    if args.cost_steps is None:
        args.cost_steps = FULL_COST_STEPS if full else DEFAULT_COST_STEPS
    if args.admission_k < 1:
        ap.error("--admission-k: admission acts at k >= 1")
    if args.cost_steps <= max(args.ks) + 1 and "cost" in args.parts:
        ap.error(f"--cost-steps must exceed max(--ks) + 1 = {max(args.ks) + 1}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return bc.config_errors(lambda: write(args))


def write(args) -> int:
    """Run the benchmark (`benchmark`), print its tables and write them under ``--out``."""
    t0 = time.perf_counter()
    result, header = benchmark(args)
    header.append(f"- total wall {(time.perf_counter() - t0) / 60:.1f} min")
    text = render(result, header)
    out = Path(args.out)
    written = []
    if "grid" in result:
        bc.write_csv(result["grid"], GRID_COLUMNS, out / "async_staleness_grid.csv")
        written.append(out / "async_staleness_grid.csv")
    if "admission" in result:
        domains = list(dict.fromkeys(d for r in result["admission"] for d in r.get("domains", [])))
        columns = ADMISSION_COLUMNS + [
            f"{w}_{d}" for d in domains for w in ("share", "target", "gap")
        ]
        bc.write_csv(result["admission"], columns, out / "async_staleness_admission.csv")
        written.append(out / "async_staleness_admission.csv")
    if "cost" in result:
        bc.write_csv(result["cost"], COST_COLUMNS, out / "async_staleness_cost.csv")
        written.append(out / "async_staleness_cost.csv")
    out.mkdir(parents=True, exist_ok=True)
    (out / "async_staleness.md").write_text(text + "\n")
    written.append(out / "async_staleness.md")
    print(text)
    print("written: " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
