"""Straightforward per-group Python-loop implementations of every preset (benchmark reference).

What a researcher would write in a fork: a loop over prompt groups, and within a group over its
responses, with per-response tensor ops. Each function takes the raw batch tensors and returns
the same decision the vectorized `Strategy` makes, in compact form:

* ``keep``: [B] bool keep mask;
* ``weights``: [B] float, mean token weight of each response over its loss tokens (0 for rows
  with none) -- or, for the token-level ``ar``, ``token_weights`` [B, T];
* ``advantages``: [B] recomputed per-response advantages (selectors that re-centre them);
* ``proportions``: [D] domain proportions (mixers).

Row semantics follow DESIGN §3-§4 and ``RolloutBatch``: padding rows and rows with a non-finite
reward, or a non-finite advantage / old log-prob on a valid token, take part in nothing.
These loops are the benchmark's oracle and reference timing, not library code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

EPS_ZERO_ADV = 1e-8


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


# ---------------------------------------------------------------------------- per-row stats
@dataclass
class Rows:
    """Per-response facts gathered by one loop over groups and their responses."""

    groups: list[list[int]]
    active: list[bool]
    reward: list[float]  # 0.0 for inactive rows
    length: list[int]  # valid tokens
    mean_adv: list[float]
    mean_abs_adv: list[float] = field(default_factory=list)
    domain: list[int] = field(default_factory=list)


def gather_rows(t: dict, need_abs: bool = False) -> Rows:
    rewards, mask, adv, olp = t["rewards"], t["response_mask"], t["advantages"], t["old_log_probs"]
    pad, gids, dids = t["is_padding"], t["group_ids"].tolist(), t["domain_ids"].tolist()
    B = len(gids)
    groups: list[list[int]] = [[] for _ in range(max(gids) + 1)]
    for i, g in enumerate(gids):
        groups[g].append(i)
    active, reward, length = [False] * B, [0.0] * B, [0] * B
    mean_adv, mean_abs = [0.0] * B, [0.0] * B
    for rows in groups:
        for i in rows:
            valid = mask[i]
            a = adv[i][valid]
            lp = olp[i][valid]
            r = float(rewards[i])
            ok = (
                not bool(pad[i])
                and math.isfinite(r)
                and bool(torch.isfinite(a).all())
                and bool(torch.isfinite(lp).all())
            )
            L = a.numel()
            length[i] = L
            if not ok:
                continue
            active[i], reward[i] = True, r
            if L:
                mean_adv[i] = float(a.sum()) / L
                if need_abs:
                    mean_abs[i] = float(a.abs().sum()) / L
    return Rows(groups, active, reward, length, mean_adv, mean_abs, dids)


def informative(rows: Rows, i: int) -> bool:
    return rows.active[i] and abs(rows.mean_adv[i]) > EPS_ZERO_ADV


def response_weights(rows: Rows, keep: list[bool], w: list[float]) -> torch.Tensor:
    """[B] mean token weight over loss tokens: w for kept rows with tokens, else 0."""
    return torch.tensor(
        [w[i] if keep[i] and rows.length[i] > 0 else 0.0 for i in range(len(keep))],
        dtype=torch.float64,
    )


def normalize(rows: Rows, keep: list[bool], raw: dict[int, float]) -> list[float]:
    """Mean 1 over kept informative rows; other kept rows 1."""
    norm = [i for i in range(len(keep)) if keep[i] and informative(rows, i)]
    mean = sum(raw[i] for i in norm) / max(len(norm), 1)
    out = [1.0 if k else 0.0 for k in keep]
    for i in norm:
        out[i] = raw[i] / mean if mean > 0 else 1.0
    return out


def grpo_recompute(rows: Rows, keep: list[bool], eps: float = 1e-6) -> torch.Tensor:
    """Per-response GRPO advantages re-centred on the kept rows of each group."""
    adv = [0.0] * len(keep)
    for members in rows.groups:
        kept = [i for i in members if keep[i]]
        if len(kept) < 2:
            continue
        mean = sum(rows.reward[i] for i in kept) / len(kept)
        var = sum((rows.reward[i] - mean) ** 2 for i in kept) / (len(kept) - 1)
        for i in kept:
            adv[i] = (rows.reward[i] - mean) / (math.sqrt(var) + eps)
    return torch.tensor(adv, dtype=torch.float64)


def group_keep_count(size: int, fraction: float) -> int:
    return min(max(round_half_up(fraction * size), 2), size)


# ---------------------------------------------------------------------------- select
def baseline(t: dict) -> dict:
    rows = gather_rows(t)
    return {
        "keep": rows.active,
        "weights": response_weights(rows, rows.active, [1.0] * len(rows.active)),
    }


def solve_rates(rows: Rows, threshold: float = 0.5) -> list[float]:
    rates = []
    for members in rows.groups:
        n = k = 0
        for i in members:
            if rows.active[i]:
                n += 1
                k += rows.reward[i] > threshold
        rates.append(k / n if n else 0.0)
    return rates


def difffilter(t: dict, low: float = 0.2, high: float = 0.8) -> dict:
    rows = gather_rows(t)
    keep = [False] * len(rows.active)
    for members in rows.groups:
        n = sum(rows.active[i] for i in members)
        k = sum(rows.active[i] and rows.reward[i] > 0.5 for i in members)
        rate = k / n if n else 0.0
        if low < rate < high:
            for i in members:
                keep[i] = rows.active[i]
    return {"keep": keep, "weights": response_weights(rows, keep, [1.0] * len(keep))}


def maxvar(t: dict, keep_fraction: float = 0.5) -> dict:
    rows = gather_rows(t)
    keep = [False] * len(rows.active)
    for members in rows.groups:
        act = sorted((rows.reward[i], i) for i in members if rows.active[i])
        size = len(act)
        if size == 0:
            continue
        n = group_keep_count(size, keep_fraction)
        best_a, best_var, variances = 0, -1.0, []
        for a in range(n + 1):
            subset = [r for r, _ in act[:a]] + [r for r, _ in act[size - (n - a) :]]
            m = sum(subset) / n
            variances.append(sum((r - m) ** 2 for r in subset) / n)
        best_var = max(variances)
        best_a = next(
            a for a, v in enumerate(variances) if v >= best_var - 1e-12 * (1 + abs(best_var))
        )
        for _, i in act[:best_a] + act[size - (n - best_a) :]:
            keep[i] = True
    return {
        "keep": keep,
        "weights": response_weights(rows, keep, [1.0] * len(keep)),
        "advantages": grpo_recompute(rows, keep),
    }


def gfpo(t: dict, keep_fraction: float = 0.5) -> dict:
    rows = gather_rows(t)
    keep = [False] * len(rows.active)
    f32 = torch.float32
    for members in rows.groups:
        act = [i for i in members if rows.active[i]]
        # efficiency in float32 like the scorer; ties: higher reward, shorter, lower index
        score = {
            i: float(
                torch.tensor(rows.reward[i], dtype=f32)
                / torch.tensor(max(rows.length[i], 1), dtype=f32)
            )
            for i in act
        }
        act.sort(key=lambda i: (-score[i], -rows.reward[i], rows.length[i], i))
        for i in act[: group_keep_count(len(act), keep_fraction)]:
            keep[i] = True
    return {
        "keep": keep,
        "weights": response_weights(rows, keep, [1.0] * len(keep)),
        "advantages": grpo_recompute(rows, keep),
    }


def topk(t: dict, fraction: float = 0.5) -> dict:
    rows = gather_rows(t, need_abs=True)
    elig = [i for members in rows.groups for i in members if rows.active[i]]
    elig.sort(key=lambda i: (-rows.mean_abs_adv[i], i))
    keep = [False] * len(rows.active)
    for i in elig[: round_half_up(fraction * len(elig))]:
        keep[i] = True
    return {
        "keep": keep,
        "weights": response_weights(rows, keep, [1.0] * len(keep)),
        "scores": rows.mean_abs_adv,
    }


# ---------------------------------------------------------------------------- reweight
def _reweight(rows: Rows, raw_of) -> dict:
    """Raw weight (``raw_of(group, row)``) per informative row, normalized to mean 1 there."""
    raw = {}
    for g, members in enumerate(rows.groups):
        for i in members:
            if informative(rows, i):
                raw[i] = raw_of(g, i)
    w = normalize(rows, rows.active, raw)
    return {"keep": rows.active, "weights": response_weights(rows, rows.active, w)}


def softmax(t: dict, temperature: float = 1.0) -> dict:
    rows = gather_rows(t, need_abs=True)
    norm = [i for members in rows.groups for i in members if informative(rows, i)]
    top = max((rows.mean_abs_adv[i] / temperature for i in norm), default=0.0)
    return _reweight(rows, lambda g, i: math.exp(rows.mean_abs_adv[i] / temperature - top))


def per(t: dict, alpha: float = 0.6, eps: float = 0.01) -> dict:
    rows = gather_rows(t, need_abs=True)
    return _reweight(rows, lambda g, i: (abs(rows.mean_abs_adv[i]) + eps) ** alpha)


def diffband(t: dict, low: float = 0.2, high: float = 0.8, inside: float = 2.0) -> dict:
    rows = gather_rows(t)
    rates = solve_rates(rows)
    return _reweight(rows, lambda g, i: inside if low <= rates[g] <= high else 1.0)


def ar(t: dict, alpha: float = 0.5) -> dict:
    """Token weights alpha * p_t + (1 - alpha), mean 1 over informative rows' valid tokens."""
    rows = gather_rows(t)
    mask, olp = t["response_mask"], t["old_log_probs"]
    raw_rows, total, count = {}, 0.0, 0
    for members in rows.groups:
        for i in members:
            if not rows.active[i]:
                continue
            valid = mask[i]
            raw = alpha * olp[i][valid].clamp(max=0).exp() + (1 - alpha)
            raw_rows[i] = raw
            if informative(rows, i):
                total += float(raw.sum())
                count += raw.numel()
    mean = total / max(count, 1)
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for members in rows.groups:
        for i in members:
            if i in raw_rows:
                if informative(rows, i) and mean > 0:
                    out[i][mask[i]] = raw_rows[i] / mean
                else:
                    out[i][mask[i]] = 1.0
    return {"keep": rows.active, "token_weights": out}


def high_entropy(t: dict, fraction: float = 0.2) -> dict:
    """Top ``fraction`` of the valid tokens of active rows by entropy: tokens >= the linear
    (1 - fraction)-quantile of the batch's, weight 1; rows with no kept token dropped."""
    rows = gather_rows(t)
    mask, ent = t["response_mask"], t["entropies"]
    values = [ent[i][mask[i]] for members in rows.groups for i in members if rows.active[i]]
    out = torch.zeros(mask.shape, dtype=torch.float32)
    keep = [False] * len(rows.active)
    pool = torch.cat(values) if values else torch.zeros(0)
    if pool.numel() == 0:
        return {"keep": keep, "token_weights": out}
    # sort-based linear quantile (torch.quantile refuses more than 2**24 values)
    ranked = torch.sort(pool).values
    rank = torch.tensor(1.0 - fraction, dtype=pool.dtype) * (pool.numel() - 1)
    lo, hi = int(rank), int(torch.ceil(rank))
    threshold = torch.lerp(ranked[lo], ranked[hi], rank - lo)
    for members in rows.groups:
        for i in members:
            if rows.active[i]:
                kept = mask[i] & (ent[i] >= threshold)
                out[i][kept] = 1.0
                keep[i] = bool(kept.any())
    return {"keep": keep, "token_weights": out}


# ---------------------------------------------------------------------------- mix
def _softmax(values: list[float], temperature: float) -> list[float]:
    z = [v / temperature for v in values]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    return [v / sum(e) for v in e]


def _floor(raw: list[float], floor: float) -> list[float]:
    s = sum(raw)
    D = len(raw)
    raw = [r / s for r in raw] if s > 0 else [1.0 / D] * D
    return [floor + (1 - D * floor) * r for r in raw]


def _fill(values: list[float], observed: list[bool]) -> list[float]:
    obs = [v for v, o in zip(values, observed) if o]
    if not obs:
        return values
    fill = sum(obs) / len(obs)
    return [v if o else fill for v, o in zip(values, observed)]


class LoopMixer:
    """Stateful loop mixer: per-step per-domain (sum, count) over a window of steps."""

    def __init__(self, preset: str, num_domains: int, window: int = 10):
        self.preset, self.D, self.window = preset, num_domains, window
        self.history: list[tuple[int, list[float], list[int]]] = []  # (step index, sums, counts)
        self.n = 0
        self.drawn = [0] * num_domains

    def __call__(self, t: dict) -> dict:
        rows = gather_rows(t)
        D = self.D
        sums, counts = [0.0] * D, [0] * D
        for members in rows.groups:
            for i in members:
                if not rows.active[i]:
                    continue
                d = rows.domain[i]
                value = abs(rows.mean_adv[i]) if self.preset == "dump_ucb" else rows.reward[i]
                sums[d] += value
                counts[d] += 1
                self.drawn[d] += 1
        if self.preset != "static":
            self.history.append((self.n, sums, counts))
            self.history = self.history[-self.window :]
        self.n += 1
        prop = self.proportions()
        return {
            "keep": rows.active,
            "weights": response_weights(rows, rows.active, [1.0] * len(rows.active)),
            "proportions": torch.tensor(prop, dtype=torch.float64),
        }

    def _windowed_mean(self) -> tuple[list[float], list[bool]]:
        vals, obs = [], []
        for d in range(self.D):
            s = sum(h[1][d] for h in self.history)
            c = sum(h[2][d] for h in self.history)
            vals.append(s / c if c else 0.0)
            obs.append(c > 0)
        return vals, obs

    def proportions(self) -> list[float]:
        D = self.D
        prior = [1.0 / D] * D
        if self.preset == "static":
            return _floor(prior, 0.0)
        if self.preset == "reward_gap":
            v, obs = self._windowed_mean()
            if not any(obs):
                return _floor(prior, 0.05)
            v = _fill(v, obs)
            return _floor(_softmax([max(v) - x for x in v], 0.1), 0.05)
        if self.preset == "dump_ucb":
            v, obs = self._windowed_mean()
            n = [max(x, 1) for x in self.drawn]
            N = max(sum(self.drawn), 1)
            bonus = [math.sqrt(2 * math.log(N) / x) for x in n]
            v = _fill(v, obs) if any(obs) else [0.0] * D
            return _floor(_softmax([a + b for a, b in zip(v, bonus)], 0.1), 0.05)
        if self.preset == "tscl":
            prog, ok = [], []
            for d in range(D):
                pts = [(x, s[d] / c[d]) for x, s, c in self.history if c[d] > 0]
                if len(pts) < 2:
                    prog.append(0.0)
                    ok.append(False)
                    continue
                xm = sum(x for x, _ in pts) / len(pts)
                ym = sum(y for _, y in pts) / len(pts)
                sxx = sum((x - xm) ** 2 for x, _ in pts)
                sxy = sum((x - xm) * (y - ym) for x, y in pts)
                prog.append(abs(sxy / sxx) if sxx > 0 else 0.0)
                ok.append(sxx > 0)
            if not any(ok):
                return _floor(prior, 0.05)
            return _floor(_softmax(_fill(prog, ok), 0.01), 0.05)
        raise KeyError(self.preset)


#: preset name -> loop implementation (a function, or a LoopMixer factory for mixers)
LOOPS = {
    "baseline": baseline,
    "difffilter": difffilter,
    "maxvar": maxvar,
    "gfpo": gfpo,
    "topk": topk,
    "softmax": softmax,
    "per": per,
    "diffband": diffband,
    "ar": ar,
    "high_entropy": high_entropy,
}
MIXERS = ("static", "reward_gap", "dump_ucb", "tscl")
