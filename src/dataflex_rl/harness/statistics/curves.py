"""Per-step summaries over seeds, for the plots: learning curves (against steps or the
generation cost spent) and mixers' proportion traces."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from dataflex_rl.harness.statistics.results import Row

AVERAGE = "average"


@dataclass(frozen=True)
class Curve:
    """One method's curve on one panel: [K] steps, means over seeds and their SEs."""

    steps: list[int]
    mean: list[float]
    se: list[float]


@dataclass(frozen=True)
class Trace:
    """One mixer's domain: [K] steps, mean target proportion and mean sampled share."""

    steps: list[int]
    target: list[float]
    actual: list[float]


def learning_curves(rows: list[Row], methods: list[str]) -> dict[str, dict[str, Curve]]:
    """panel -> method -> `Curve`, panels in first-seen benchmark order then "average";
    empty when the rows carry no steps (final scores only)."""
    rows = [r for r in rows if r.step is not None]
    if not rows:
        return {}
    benchmarks = list(dict.fromkeys(r.benchmark for r in rows))
    # (panel, method, step) -> {seed: score}; the average is over benchmarks per run and step
    cells: dict[tuple, dict] = defaultdict(dict)
    per_run: dict[tuple, list] = defaultdict(list)
    for r in rows:
        cells[(r.benchmark, r.method, r.step)][r.seed] = r.score
        per_run[(r.method, r.step, r.seed)].append(r.score)
    panels = benchmarks + ([AVERAGE] if len(benchmarks) > 1 else [])
    for (m, step, seed), v in per_run.items():
        if len(v) == len(benchmarks):
            cells[(AVERAGE, m, step)][seed] = float(np.mean(v))
    out: dict[str, dict[str, Curve]] = {}
    for panel in panels:
        out[panel] = {}
        for m in methods:
            steps = sorted(st for (p, mm, st) in cells if p == panel and mm == m)
            if not steps:
                continue
            vals = [np.array(list(cells[(panel, m, st)].values())) for st in steps]
            out[panel][m] = Curve(
                steps,
                [float(v.mean()) for v in vals],
                [float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0 for v in vals],
            )
    return out


#: ``Row.extra`` key of a checkpoint's generation cost so far
TOKENS = "generated_tokens"


def token_curves(
    rows: list[Row], methods: list[str], points: int = 21
) -> dict[str, dict[str, Curve]]:
    """panel -> method -> `Curve` over generation cost (``steps`` are `TOKENS`): each run's
    average score interpolated onto ``points`` common costs, mean and SE over seeds (empty
    without costs or a shared range)."""
    rows = [r for r in rows if r.step is not None and TOKENS in r.extra]
    if not rows:
        return {}
    benchmarks = list(dict.fromkeys(r.benchmark for r in rows))
    panel = AVERAGE if len(benchmarks) > 1 else benchmarks[0]
    scores: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    cost: dict[tuple, float] = {}
    for r in rows:
        scores[(r.method, r.seed)][r.step].append(r.score)
        cost[(r.method, r.seed, r.step)] = float(r.extra[TOKENS])
    runs = {}
    for (m, seed), by_step in scores.items():
        steps = sorted(s for s, v in by_step.items() if len(v) == len(benchmarks))
        if steps:
            runs[(m, seed)] = (
                np.array([cost[(m, seed, s)] for s in steps]),
                np.array([float(np.mean(by_step[s])) for s in steps]),
            )
    if not runs:
        return {}
    start = max(float(t[0]) for t, _ in runs.values())
    end = min(float(t[-1]) for t, _ in runs.values())
    if not end > start:
        return {}
    grid = np.linspace(start, end, points)
    out: dict[str, Curve] = {}
    for m in methods:
        ys = [np.interp(grid, t, y) for (mm, _), (t, y) in runs.items() if mm == m]
        if not ys:
            continue
        v = np.array(ys)
        n = v.shape[0]
        se = v.std(0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(points)
        out[m] = Curve([int(round(g)) for g in grid], v.mean(0).tolist(), se.tolist())
    return {panel: out}


def proportion_traces(rows: list[dict]) -> dict[str, dict[str, Trace]]:
    """method -> domain -> `Trace` from ``proportions.csv`` rows (method, seed, step, domain,
    target, actual), in first-seen order; empty without rows."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    out: dict[str, dict[str, Trace]] = {m: {} for m in methods}
    for m, d in itertools.product(methods, domains):
        by_step: dict[int, list] = defaultdict(list)
        for r in rows:
            if r["method"] == m and r["domain"] == d:
                by_step[r["step"]].append(r)
        steps = sorted(by_step)
        target, actual = (
            [_finite_mean([r[col] for r in by_step[s]]) for s in steps]
            for col in ("target", "actual")
        )
        out[m][d] = Trace(steps, target, actual)
    return out


def _finite_mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (NaN when none is finite)."""
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
