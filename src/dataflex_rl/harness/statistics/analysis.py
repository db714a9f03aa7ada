"""From final scores to the comparison: per summary (benchmark, domain, average), per method.

Summaries, verdict rule, controls and MDE: docs/harness.md, "Statistics". Every number a report
prints is computed here and stored in the `Analysis`; harness/reporting only formats them.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dataflex_rl.core.config import Checked, param
from dataflex_rl.harness.statistics import power, stats
from dataflex_rl.harness.statistics.aggregates import (
    MethodAggregate,
    Profiles,
    method_aggregates,
    profiles,
)
from dataflex_rl.harness.statistics.curves import (
    Curve,
    Trace,
    learning_curves,
    proportion_traces,
    token_curves,
)
from dataflex_rl.harness.statistics.power import SeedAdvice, seed_advice
from dataflex_rl.harness.statistics.results import (
    Row,
    final_scores,
    scores_are_fractions,
    seed_sort_key,
)
from dataflex_rl.harness.statistics.sequential import EQUIVALENT, UNDECIDED

BETTER, WORSE = "better", "worse"
NO_DIFF, TOO_FEW = "no detectable difference", "not enough paired seeds"
#: a control's required outcome -> the verdict it must get
CONTROL_KINDS = {"same": NO_DIFF, "worse": WORSE}
#: verdicts at the margin (`Comparison.margin_verdict`), besides EQUIVALENT and UNDECIDED
NONINFERIOR, INFERIOR = "non-inferior", "inferior"


@dataclass
class StatsOptions(Checked):
    """Options of the paired statistics (an experiment's ``statistics:`` block, ``report``'s
    flags)."""

    alpha: float = param(0.05, "family-wise error rate (Holm) and 1 - confidence", gt=0.0, lt=1.0)
    power: float = param(0.8, "power of the minimum detectable effect", gt=0.0, lt=1.0)
    n_boot: int = param(10_000, "bootstrap resamples", ge=100)
    n_perm: int = param(10_000, "random sign flips when a method has more than 16 seeds", ge=100)
    seed: int = param(0, "seed of the bootstrap and random sign flips", ge=0)
    margin: float = param(
        0.0,
        "non-inferiority and equivalence margin in score units (0.01: 1 point of accuracy); "
        "0: no margin tests",
        ge=0.0,
    )


@dataclass
class MethodStats:
    """One method under one summary: mean over seeds with its t interval."""

    method: str
    n: int
    mean: float
    low: float
    high: float
    sd: float


@dataclass
class Comparison:
    """One method minus the baseline under one summary, paired by seed."""

    method: str
    n_pairs: int
    delta: float = math.nan
    sd_diff: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    level: float = math.nan
    corrected_ci: tuple[float, float] = (math.nan, math.nan)
    p: float = math.nan
    p_holm: float = math.nan
    #: simulated MDE of the verdict rule at n_pairs seeds in this comparison's Holm family
    mde: float = math.nan
    verdict: str = TOO_FEW
    #: Pearson correlation across paired seeds of the method's and the baseline's scores
    corr: float = math.nan
    #: a control's required outcome ("same" or "worse"); "" for a real method
    control: str = ""
    #: the smallest Holm-adjusted p it could get in its family (`stats.holm_floors`)
    p_holm_floor: float = 1.0
    #: ``p_holm_floor <= alpha``; when not, ``ci`` and ``corrected_ci`` stay NaN
    verdict_possible: bool = False
    #: the fewest paired seeds at which its family can reach a verdict; None beyond 64
    seeds_for_verdict: int | None = None
    #: whether a control got its required verdict; None when not a control or untested
    control_passed: bool | None = None
    #: a control's outcome in words (`control_status`); "" for a real method
    control_status: str = ""
    #: with a margin M (`StatsOptions.margin`), one-sided sign-flip p-values, each Holm over
    #: the family: "not worse by more than M" (H0: Δ ≤ −M, on the differences + M),
    #: "worse by more than M" (H0: Δ ≥ −M) and "equivalent within ±M" (TOST: the larger of
    #: the p of H0: Δ ≤ −M and of H0: Δ ≥ M); NaN without a margin or test
    p_noninferior: float = math.nan
    p_noninferior_holm: float = math.nan
    p_inferior: float = math.nan
    p_inferior_holm: float = math.nan
    p_equivalent: float = math.nan
    p_equivalent_holm: float = math.nan
    #: "equivalent", "non-inferior", "inferior", "undecided" (`margin_verdict`); TOO_FEW under
    #: 2 pairs; "" without a margin
    margin_verdict: str = ""
    #: where undecided, the fewest paired seeds at which "not worse by more than M" is reached
    #: with probability `power` if the method equals the baseline, at this SD of paired
    #: differences (simulated, `power.simulated_seeds_needed`, one-sided); None beyond 64,
    #: where decided, or without a margin
    seeds_for_margin: int | None = None


def control_passed(c: Comparison) -> bool | None:
    """Whether control ``c`` got its required verdict; None when not a control or untested
    (no verdict possible at its seed count)."""
    if not c.control or not c.verdict_possible:
        return None
    return c.verdict == CONTROL_KINDS[c.control]


def control_status(c: Comparison) -> str:
    """A control's outcome in words: "passed", "FAILED" or "untested (3 seeds: no verdict
    possible; needs 6)"; "" for a real method."""
    if not c.control:
        return ""
    if c.control_passed is not None:
        return "passed" if c.control_passed else "FAILED"
    need = c.seeds_for_verdict
    return f"untested ({c.n_pairs} seed{'s' if c.n_pairs != 1 else ''}: no verdict possible; " + (
        f"needs {need})" if need is not None else "needs more than 64)"
    )


@dataclass
class SummaryResult:
    """Every method under one summary."""

    name: str
    kind: str  # "benchmark", "domain" or "average"
    methods: list[MethodStats]
    comparisons: list[Comparison]
    #: control arms: their means and comparisons (each a family of one)
    control_methods: list[MethodStats] = field(default_factory=list)
    controls: list[Comparison] = field(default_factory=list)
    #: root mean square of the real comparisons' SDs of paired differences (`pooled_sd`)
    pooled_sd: float = math.nan
    #: simulated MDE at the fewest paired seeds of the real comparisons and ``pooled_sd``
    mde: float = math.nan

    def mean_of(self, method: str) -> float:
        return next(m.mean for m in self.methods if m.method == method)

    def pair_counts(self) -> tuple[int, int]:
        """(min, max) paired seeds over the real comparisons ((0, 0) without any)."""
        ns = [c.n_pairs for c in self.comparisons]
        return (min(ns), max(ns)) if ns else (0, 0)


@dataclass
class Analysis:
    """The whole comparison, and every number a report of it prints."""

    baseline: str
    methods: list[str]
    seeds: list[str]
    summaries: list[SummaryResult]
    #: [S, S] Kendall tau-b between the method rankings of the summaries
    tau: np.ndarray
    options: StatsOptions
    notes: list[str] = field(default_factory=list)
    #: control label -> required outcome ("same" or "worse"); not in ``methods``
    controls: dict[str, str] = field(default_factory=dict)
    #: the summaries the average is the mean of (`average_parts`, those analyzed)
    parts: list[str] = field(default_factory=list)
    #: every score lies in [0, 1] (`results.scores_are_fractions`): shown in points
    fractions: bool = False
    #: [S, M] competition ranks of ``methods`` by mean under each summary (1 = highest)
    ranks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    #: what the primary summary's seed count allows (`power.seed_advice`)
    advice: SeedAdvice | None = None
    #: IQM and P(> baseline) of the real methods over runs × benchmarks (`aggregates`)
    aggregates: list[MethodAggregate] = field(default_factory=list)
    #: performance profiles of the same scores (None where ``aggregates`` is empty)
    profiles: Profiles | None = None
    #: panel -> method -> learning curve (`curves.learning_curves`; empty without steps)
    curves: dict[str, dict[str, Curve]] = field(default_factory=dict)
    #: panel -> method -> mean score against generation cost (``steps`` are tokens)
    token_curves: dict[str, dict[str, Curve]] = field(default_factory=dict)
    #: mixer -> domain -> proportion trace (`curves.proportion_traces`)
    traces: dict[str, dict[str, Trace]] = field(default_factory=dict)
    #: other accuracy (``Row.extra`` key) -> summary -> method -> mean of final values
    extra_means: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    #: the accuracy ``score`` is and the other one beside it (`score_metric`)
    compared: str = "score"
    beside: str | None = None

    def summary(self, name: str) -> SummaryResult:
        return next(s for s in self.summaries if s.name == name)

    @property
    def primary(self) -> SummaryResult:
        """The average summary (the last one)."""
        return self.summaries[-1]


Matrices = dict[str, tuple[str, np.ndarray]]


def score_matrices(rows: list[Row]) -> tuple[list[str], list[str], Matrices, list[str]]:
    """``(methods, seeds, {summary: (kind, [M, S] final scores)}, notes)``: NaN where a run
    lacks the benchmark; methods in first-seen order, the average summary last."""
    final = final_scores(rows)
    methods = list(dict.fromkeys(r.method for r in rows))
    seeds = sorted({r.seed for r in rows}, key=seed_sort_key)
    benchmarks, domain_of, domains = _domains(rows)
    mi, si = {m: i for i, m in enumerate(methods)}, {s: i for i, s in enumerate(seeds)}
    bench = {b: np.full((len(methods), len(seeds)), np.nan) for b in benchmarks}
    for (m, s, b), v in final.items():
        bench[b][mi[m], si[s]] = v
    out: dict[str, tuple[str, np.ndarray]] = {b: ("benchmark", x) for b, x in bench.items()}
    by_domain = {
        d: np.mean([bench[b] for b in benchmarks if domain_of[b] == d], axis=0) for d in domains
    }
    if 1 < len(domains) < len(benchmarks):  # only domains that group several benchmarks
        sizes = {d: sum(domain_of[b] == d for b in benchmarks) for d in domains}
        out.update(
            {d: ("domain", x) for d, x in by_domain.items() if sizes[d] > 1 and d not in out}
        )
    parts = list(by_domain.values()) if len(domains) > 1 else list(bench.values())
    average = np.mean(parts, axis=0)  # NaN for a run that lacks any benchmark
    out["average"] = ("average", average)
    notes = [
        f"average: mean over {len(domains)} domains ({', '.join(domains)}), each weighing the same"
        if len(domains) > 1
        else f"average: mean over {len(benchmarks)} benchmark(s)"
    ]
    lacking = int(
        np.sum(np.isnan(average) & ~np.all([np.isnan(x) for x in bench.values()], axis=0))
    )
    if lacking:
        notes.append(f"{lacking} run(s) lack some benchmark and are left out of the average.")
    return methods, seeds, out, notes


def _domains(rows: list[Row]) -> tuple[list[str], dict[str, str], list[str]]:
    """(benchmarks, benchmark -> domain, domains), in first-seen order."""
    benchmarks = list(dict.fromkeys(r.benchmark for r in rows))
    domain_of = {r.benchmark: r.domain or r.benchmark for r in rows}
    return benchmarks, domain_of, list(dict.fromkeys(domain_of[b] for b in benchmarks))


def average_parts(rows: list[Row]) -> list[str]:
    """Names of the summaries the average is the mean of (domains, else benchmarks; empty for
    one benchmark)."""
    benchmarks, domain_of, domains = _domains(rows)
    if len(benchmarks) < 2:
        return []
    if len(domains) < 2:
        return benchmarks
    members = {d: [b for b in benchmarks if domain_of[b] == d] for d in domains}
    return [d if len(bs) > 1 else bs[0] for d, bs in members.items()]


def _rng(options: StatsOptions, summary: str, method: str) -> np.random.Generator:
    """A generator per (summary, method): results do not depend on which others are compared."""
    return np.random.default_rng(
        [options.seed, zlib.crc32(summary.encode()), zlib.crc32(method.encode())]
    )


def _method_stats(method: str, x: np.ndarray, alpha: float) -> MethodStats:
    x = x[np.isfinite(x)]
    mean, low, high = stats.t_interval(x, alpha)
    sd = float(x.std(ddof=1)) if x.size > 1 else math.nan
    return MethodStats(method, int(x.size), mean, low, high, sd)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two [n] arrays; NaN when n < 3 or either is constant."""
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _compare(
    summary: str, method: str, x: np.ndarray, base: np.ndarray, options: StatsOptions
) -> tuple[Comparison, np.ndarray | None]:
    paired = np.isfinite(x) & np.isfinite(base)
    d = x[paired] - base[paired]
    c = Comparison(method, int(d.size))
    if d.size == 0:
        return c, None
    c.delta = float(d.mean())
    if d.size < 2:
        return c, None
    rng = _rng(options, summary, method)
    c.sd_diff = float(d.std(ddof=1))
    c.corr = pearson(x[paired], base[paired])
    c.p = stats.sign_flip_pvalue(d, rng, options.n_perm)
    means = stats.bootstrap_means(d, rng, options.n_boot)
    if options.margin > 0:
        up, down = d + options.margin, d - options.margin
        c.p_noninferior = stats.sign_flip_pvalue(up, rng, options.n_perm, alternative="greater")
        c.p_inferior = stats.sign_flip_pvalue(up, rng, options.n_perm, alternative="less")
        below = stats.sign_flip_pvalue(down, rng, options.n_perm, alternative="less")
        c.p_equivalent = max(c.p_noninferior, below)
    return c, means


def _family(
    name: str, labels: list[str], rows: np.ndarray, base: np.ndarray, options: StatsOptions
) -> list[Comparison]:
    """Paired comparisons of ``labels`` ([K, S] ``rows``) against ``base`` [S], one Holm
    family: p-values, corrected intervals, verdicts and simulated MDEs."""
    pairs = [_compare(name, m, x, base, options) for m, x in zip(labels, rows)]
    comps, boots = [c for c, _ in pairs], [means for _, means in pairs]
    adjusted, level = stats.holm([c.p for c in comps], options.alpha)
    floors = stats.holm_floors(
        [stats.pvalue_floor(c.n_pairs, options.n_perm) if c.n_pairs >= 2 else 1.0 for c in comps]
    )
    need = stats.seeds_for_verdict(len(comps), options.alpha, options.n_perm)
    for c, means, p_adj, lev, floor in zip(comps, boots, adjusted, level, floors):
        c.seeds_for_verdict = need
        if means is None:
            continue
        c.p_holm, c.level = float(p_adj), float(lev)
        c.p_holm_floor = float(floor)
        c.verdict_possible = c.p_holm_floor <= options.alpha
        if c.verdict_possible:
            c.ci = stats.percentile_interval(means, options.alpha)
            c.corrected_ci = stats.percentile_interval(means, c.level)
        c.mde = power.simulated_mde(
            c.sd_diff, c.n_pairs, m=len(comps), alpha=options.alpha, power=options.power
        )
        c.verdict = NO_DIFF
        if c.p_holm <= options.alpha and c.corrected_ci[0] > 0:
            c.verdict = BETTER
        elif c.p_holm <= options.alpha and c.corrected_ci[1] < 0:
            c.verdict = WORSE
    if options.margin > 0:
        _margin_tests(comps, options)
    return comps


def _margin_tests(comps: list[Comparison], options: StatsOptions) -> None:
    """Holm over the family for each margin test, the margin verdicts and the seeds a
    non-inferiority verdict needs."""
    for name in ("p_noninferior", "p_inferior", "p_equivalent"):
        adjusted, _ = stats.holm([getattr(c, name) for c in comps], options.alpha)
        for c, p in zip(comps, adjusted):
            setattr(c, f"{name}_holm", float(p))
    for c in comps:
        c.margin_verdict = margin_verdict(c, options.alpha)
        if c.margin_verdict != UNDECIDED:
            continue
        c.seeds_for_margin = power.simulated_seeds_needed(
            c.sd_diff,
            options.margin,
            m=len(comps),
            alpha=options.alpha,
            power=options.power,
            sides=1,
        )


def margin_verdict(c: Comparison, alpha: float) -> str:
    """The verdict at the margin from the Holm-adjusted p-values: equivalent (it implies
    non-inferior), non-inferior, inferior, else undecided; TOO_FEW under 2 paired seeds."""
    if c.n_pairs < 2:
        return TOO_FEW
    for verdict, p in (
        (EQUIVALENT, c.p_equivalent_holm),
        (NONINFERIOR, c.p_noninferior_holm),
        (INFERIOR, c.p_inferior_holm),
    ):
        if p <= alpha:
            return verdict
    return UNDECIDED


def analyze_summary(
    name: str,
    kind: str,
    methods: list[str],
    matrix: np.ndarray,
    baseline: str,
    options: StatsOptions,
    controls: Mapping[str, str] | None = None,
) -> SummaryResult:
    """Means, paired comparisons against ``baseline``, Holm over the other methods, of
    ``matrix`` [M, S] (rows ``methods``, controls included; NaN where missing)."""
    controls = dict(controls or {})
    b = methods.index(baseline)
    real = [i for i, m in enumerate(methods) if i != b and m not in controls]
    ctrl = [i for i, m in enumerate(methods) if m in controls]
    stats_of = [_method_stats(m, matrix[i], options.alpha) for i, m in enumerate(methods)]
    comps = _family(name, [methods[i] for i in real], matrix[real], matrix[b], options)
    # each control is its own check of the instrument (a family of one): an A/A copy must show
    # the false-positive rate of a single test, a harm the power of a single test; pooling
    # them would make a harm undetectable whenever an A/A arm is added (Holm doubles its p)
    ctrl_comps = [_family(name, [methods[i]], matrix[[i]], matrix[b], options)[0] for i in ctrl]
    for c in ctrl_comps:
        c.control = controls[c.method]
        c.control_passed = control_passed(c)
        c.control_status = control_status(c)
    sd = pooled_sd(comps)
    n = min((c.n_pairs for c in comps), default=0)
    mde = power.simulated_mde(sd, n, m=max(1, len(comps)), alpha=options.alpha, power=options.power)
    own = [stats_of[i] for i in range(len(methods)) if i not in ctrl]
    return SummaryResult(name, kind, own, comps, [stats_of[i] for i in ctrl], ctrl_comps, sd, mde)


def pooled_sd(comparisons: list[Comparison]) -> float:
    """Root mean square of the comparisons' SDs of paired differences above 0 (NaN if none)."""
    sds = [c.sd_diff for c in comparisons if math.isfinite(c.sd_diff) and c.sd_diff > 0]
    return math.sqrt(float(np.mean(np.square(sds)))) if sds else math.nan


def _advice(s: SummaryResult, options: StatsOptions, effect: float | None) -> SeedAdvice:
    n, _ = s.pair_counts()
    m = max(1, len(s.comparisons))
    return seed_advice(n, m, s.pooled_sd, alpha=options.alpha, power=options.power, effect=effect)


def _check_controls(controls: Mapping[str, str], methods: list[str], baseline: str) -> None:
    for label, kind in controls.items():
        if kind not in CONTROL_KINDS:
            raise ValueError(
                f"control {label!r}: required outcome {kind!r}, expected one of "
                f"{', '.join(CONTROL_KINDS)}"
            )
        if label == baseline:
            raise ValueError(f"control {label!r} is the baseline")
        if label not in methods:
            raise ValueError(f"control {label!r} has no results; methods: {', '.join(methods)}")


def analyze(
    rows: list[Row],
    baseline: str,
    options: StatsOptions | None = None,
    controls: Mapping[str, str] | None = None,
    *,
    proportions: list[dict] | None = None,
    seeds_needed: bool = False,
) -> Analysis:
    """The full comparison of every method against ``baseline`` under every summary.

    ``controls``: label -> "same" | "worse", each its own family, out of the rankings;
    ``proportions``: rows of ``proportions.csv``; ``seeds_needed``: also simulate the seeds a
    1-point difference needs (seconds). ValueError on no rows or a bad baseline or control.
    """
    options = options or StatsOptions()
    controls = dict(controls or {})
    if not rows:
        raise ValueError("no results to analyze")
    methods, seeds, matrices, notes = score_matrices(rows)
    if baseline not in methods:
        raise ValueError(f"baseline {baseline!r} has no results; methods: {', '.join(methods)}")
    _check_controls(controls, methods, baseline)
    methods = [baseline] + [m for m in methods if m != baseline]
    summaries = []
    first_seen = list(dict.fromkeys(r.method for r in rows))
    perm = [first_seen.index(m) for m in methods]
    for name, (kind, x) in matrices.items():
        summaries.append(analyze_summary(name, kind, methods, x[perm], baseline, options, controls))
    methods = [m for m in methods if m not in controls]
    means = np.array([[s.mean_of(m) for m in methods] for s in summaries])
    k = len(summaries)
    tau = stats.kendall_tau_matrix(means)
    fractions = scores_are_fractions(r.score for r in rows)
    scores = aggregate_scores(methods, first_seen, matrices)
    aggs = method_aggregates(scores, baseline, fractions, options.seed)
    return Analysis(
        baseline,
        methods,
        seeds,
        summaries,
        tau,
        options,
        notes,
        controls,
        parts=[p for p in average_parts(rows) if p in matrices],
        fractions=fractions,
        ranks=np.array([stats.ranks(row) for row in means]).reshape(k, len(methods)),
        advice=_advice(summaries[-1], options, 0.01 if fractions and seeds_needed else None),
        aggregates=aggs,
        profiles=profiles(scores) if aggs else None,
        curves=learning_curves(rows, methods),
        token_curves=token_curves(rows, methods),
        traces=proportion_traces(proportions or []),
        extra_means=extra_means(rows),
        compared=score_metric(rows)[0],
        beside=score_metric(rows)[1],
    )


def aggregate_scores(
    methods: list[str], first_seen: list[str], matrices: Matrices
) -> dict[str, np.ndarray]:
    """method -> [R, T] final scores over benchmarks (``matrices``' rows in ``first_seen``
    order), runs with every benchmark only, methods with at least two such runs only."""
    bench = [x for kind, x in matrices.values() if kind == "benchmark"]
    out = {}
    for m in methods:
        x = np.stack([b[first_seen.index(m)] for b in bench], axis=1)  # [S, T]
        x = x[np.all(np.isfinite(x), axis=1)]
        if x.shape[0] >= 2:
            out[m] = x
    return out


#: accuracies the engine records beside ``score`` (``Row.extra``)
ENGINE_METRICS = ("sampled", "greedy")


def score_metric(rows: list[Row]) -> tuple[str, str | None]:
    """(the engine accuracy equal to ``score`` on every row, else "score"; the other accuracy
    every row carries, or None)."""
    same = [k for k in ENGINE_METRICS if all(r.extra.get(k) == r.score for r in rows)]
    name = same[0] if same else "score"
    other = [k for k in ENGINE_METRICS if k != name and all(k in r.extra for r in rows)]
    return name, (other[0] if other and name != "score" else None)


def extra_means(rows: list[Row]) -> dict[str, dict[str, dict[str, float]]]:
    """metric -> summary -> method -> mean over seeds of the final values of ``Row.extra``'s
    ``metric``, for every metric each row carries (the engine's other accuracy)."""
    keys = [k for k in rows[0].extra if all(k in r.extra for r in rows)] if rows else []
    out = {}
    for k in keys:
        moved = [Row(r.method, r.seed, r.benchmark, r.extra[k], r.domain, r.step) for r in rows]
        methods, _, mats, _ = score_matrices(moved)
        out[k] = {}
        for name, (_, x) in mats.items():
            with np.errstate(all="ignore"):
                means = [float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for v in x]
            out[k][name] = dict(zip(methods, means))
    return out
