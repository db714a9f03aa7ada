"""Plain-loop oracles of the vectorized code (test oracles only: Python loops per group)."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction


def rows(batch):
    """Per-row Python values: reward, padding, token mask, advantages, log-probs."""
    B = batch.batch_size
    out = []
    for i in range(B):
        mask = batch.response_mask[i].tolist()
        adv = None if batch.advantages is None else batch.advantages[i].tolist()
        lp = None if batch.old_log_probs is None else batch.old_log_probs[i].tolist()
        out.append(
            dict(
                r=float(batch.rewards[i]),
                pad=bool(batch.is_padding[i]),
                g=int(batch.group_ids[i]),
                d=int(batch.domain_ids[i]),
                mask=mask,
                adv=adv,
                lp=lp,
                length=sum(mask),
            )
        )
    return out


def active(row) -> bool:
    """Documented: not padding, finite reward, finite advantages/log-probs on valid tokens."""
    if row["pad"] or not math.isfinite(row["r"]):
        return False
    for t in (row["adv"], row["lp"]):
        if t is not None and any(m and not math.isfinite(v) for m, v in zip(row["mask"], t)):
            return False
    return True


def mean_adv(row) -> float:
    vals = [v for m, v in zip(row["mask"], row["adv"]) if m]
    return sum(vals) / len(vals) if vals else 0.0


def informative(batch) -> list[bool]:
    rs = rows(batch)
    if batch.advantages is not None:
        return [active(r) and abs(mean_adv(r)) > 1e-8 for r in rs]
    stats = group_stats(batch)
    return [active(r) and stats["std"][r["g"]] > 0 for r in rs]


def group_stats(batch, threshold: float = 0.5) -> dict:
    """size, successes, mean, unbiased std, rank within group (ties by index, inactive last)."""
    rs = rows(batch)
    G = batch.num_groups
    members = [[i for i, r in enumerate(rs) if r["g"] == g] for g in range(G)]
    out = {"size": [], "successes": [], "mean": [], "std": [], "rank": [0] * len(rs)}
    for g in range(G):
        act = [i for i in members[g] if active(rs[i])]
        vals = [rs[i]["r"] for i in act]
        out["size"].append(len(vals))
        out["successes"].append(sum(v > threshold for v in vals))
        out["mean"].append(sum(vals) / len(vals) if vals else 0.0)
        out["std"].append(statistics.stdev(vals) if len(vals) > 1 else 0.0)
        order = sorted(act, key=lambda i: (rs[i]["r"], i)) + sorted(
            i for i in members[g] if not active(rs[i])
        )
        for pos, i in enumerate(order):
            out["rank"][i] = pos
    return out


def round_half_up_exact(fraction: float, n: int) -> int:
    """round-half-up of fraction * n, with the fraction read as the decimal it was written as."""
    x = Fraction(repr(fraction)) * n
    return math.floor(x + Fraction(1, 2))


def keep_count(fraction: float, n: int) -> int:
    return min(max(round_half_up_exact(fraction, n), 2), n)


def pvariance(xs) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def grpo_advantages(batch, keep, norm_by_std=True, eps=1e-6) -> list[float]:
    """Per-response GRPO advantage re-centred on the kept rows of each group."""
    rs = rows(batch)
    out = [0.0] * len(rs)
    for g in range(batch.num_groups):
        kept = [i for i, r in enumerate(rs) if r["g"] == g and keep[i] and active(r)]
        if len(kept) < 2:
            continue
        vals = [rs[i]["r"] for i in kept]
        m, sd = sum(vals) / len(vals), statistics.stdev(vals)
        for i in kept:
            out[i] = (rs[i]["r"] - m) / (sd + eps) if norm_by_std else rs[i]["r"] - m
    return out


def apportion(p, n, capacity, deficit, grid=2.0**30) -> tuple[list[int], list[float]]:
    """`sampler.apportion` prompt by prompt: the draw's mass water-filled under the capacities,
    what each domain owes (its carried deficit plus its mass; none without capacity, on the
    grid), then each prompt to the domain whose next one falls due soonest (owed ones first,
    then the rest within capacity; ties: lower index)."""
    D = len(p)
    mass = [0.0] * D
    remaining = min(float(n), float(sum(capacity)))
    open_ = [c > 0 for c in capacity]
    for _ in range(D):
        if remaining <= 0 or not any(open_):
            break
        w = [p[d] if open_[d] else 0.0 for d in range(D)]
        if sum(w) <= 0:
            w = [1.0 if o else 0.0 for o in open_]
        total_w = sum(w)
        add = [min(w[d] / total_w * remaining, capacity[d] - mass[d]) for d in range(D)]
        for d in range(D):
            mass[d] += add[d]
        remaining -= sum(add)
        open_ = [mass[d] < capacity[d] for d in range(D)]
    owed = [
        round((deficit[d] + mass[d]) * grid) / grid if capacity[d] > 0 else 0.0 for d in range(D)
    ]
    rate = [m / max(n, 1) for m in mass]
    counts = [0] * D
    for _ in range(min(n, sum(capacity))):
        best = None
        for d in range(D):
            k = counts[d]
            if k >= capacity[d]:
                continue
            num = k + 1 - owed[d]
            due = num / rate[d] if rate[d] > 0 else (math.inf if num >= 0 else -math.inf)
            key = (0 if k < owed[d] else 1, due, d)
            best = key if best is None or key < best else best
        counts[best[2]] += 1
    return counts, [owed[d] - counts[d] for d in range(D)]
