"""A results table in a paper's release layout, generated: one row per run, columns
``run_id, campaign, model, method, seed, steps, regime``, then one column per benchmark, scores
in percent, several models, campaigns and regimes in one file, rows in no particular order.

Campaign c1 has 3 seeds per (model, regime); c2 has 8, except llama-3.1-8b/long with 6. In c2,
difffilter gains 3 points on every benchmark over grpo (the seed's noise, SD 2, is shared by
every method of that seed; difffilter adds its own, SD 0.3, dump_ucb SD 1 and no gain). `long_rows` is the by-hand reshape the tests use as the oracle.

`paper_records` is a paper-sized release (issue 32): 171 runs of 3 models in 3 campaigns, 12
benchmark columns in percent, 3 seeds per cell, 13 strata of (model, campaign, regime) with the
regime cell empty for most runs, a mixing campaign whose reference is ``static`` (no
``baseline``) and a stratum with a single method (`PAPER_STRATA`).
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np

MODELS = ("qwen2.5-math-7b", "llama-3.1-8b")
CAMPAIGNS = ("c1", "c2")
REGIMES = ("short", "long")
METHODS = ("grpo", "difffilter", "dump_ucb")
BENCHMARKS = {
    "math500": "math",
    "aime24": "math",
    "amc23": "math",
    "minerva_math": "math",
    "gpqa_diamond": "science",
    "mmlu_pro_physics": "science",
}
#: a report title with markup (shown as typed, never parsed)
TITLE = "Release <i>table</i> & strata"
HEADER = ["run_id", "campaign", "model", "method", "seed", "steps", "regime", *BENCHMARKS]


def seeds_of(campaign: str, model: str, regime: str) -> int:
    if campaign == "c1":
        return 3
    return 6 if (model, regime) == ("llama-3.1-8b", "long") else 8


def release_records(rng_seed: int = 0) -> list[dict]:
    """The table's rows as dicts over `HEADER` (scores as text, one decimal)."""
    rng = np.random.default_rng(rng_seed)
    base = {b: 20 + 60 * rng.random() for b in BENCHMARKS}
    rows = []
    for campaign, model, regime in itertools.product(CAMPAIGNS, MODELS, REGIMES):
        shift = (5.0 if model.startswith("qwen") else 0.0) + (2.0 if regime == "long" else 0.0)
        for seed in range(seeds_of(campaign, model, regime)):
            seed_noise = {b: rng.normal(0, 2.0) for b in BENCHMARKS}
            for method in METHODS:
                gain = 3.0 if (method == "difffilter" and campaign == "c2") else 0.0
                own_sd = {"grpo": 0.0, "difffilter": 0.3, "dump_ucb": 1.0}[method]
                row = {
                    "campaign": campaign,
                    "model": model,
                    "method": method,
                    "seed": seed,
                    "steps": 500 if regime == "short" else 1000,
                    "regime": regime,
                }
                for b in BENCHMARKS:
                    v = base[b] + shift + seed_noise[b] + gain + rng.normal(0, own_sd)
                    row[b] = f"{round(v, 1):.1f}"
                rows.append(row)
    order = rng.permutation(len(rows))
    out = [rows[i] for i in order]
    for k, r in enumerate(out):
        r["run_id"] = f"r{k:03d}"
    return out


def write_release_csv(path: Path, records: list[dict] | None = None) -> Path:
    records = release_records() if records is None else records
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        w.writerows(records)
    return path


def long_rows(
    records: list[dict], model: str, campaign: str, regime: str, benchmarks: dict | None = None
) -> list[list]:
    """The by-hand reshape of one stratum: method, seed, benchmark, domain, score (percent);
    ``benchmarks``: benchmark -> domain (default `BENCHMARKS`)."""
    benchmarks = BENCHMARKS if benchmarks is None else benchmarks
    return [
        [r["method"], r["seed"], b, benchmarks[b], r[b]]
        for r in records
        if (r["model"], r["campaign"], r["regime"]) == (model, campaign, regime)
        for b in benchmarks
        if r[b] != ""
    ]


def write_domains_yaml(path: Path, benchmarks: dict | None = None) -> Path:
    """``domain: [benchmark, ...]`` of ``benchmarks`` (default `BENCHMARKS`)."""
    groups: dict[str, list[str]] = {}
    for b, d in (BENCHMARKS if benchmarks is None else benchmarks).items():
        groups.setdefault(d, []).append(b)
    path.write_text(
        "# benchmark groups: each domain weighs the same in the average\n"
        + "".join(f"{d}: [{', '.join(bs)}]\n" for d, bs in groups.items())
    )
    return path


PAPER_BENCHMARKS = {
    "math500": "math",
    "aime24": "math",
    "aime25": "math",
    "amc23": "math",
    "minerva_math": "math",
    "olympiadbench": "math",
    "gsm8k": "math",
    "gpqa_diamond": "science",
    "mmlu_pro_physics": "science",
    "mmlu_pro_chemistry": "science",
    "arc_challenge": "science",
    "logiqa": "logic",
}
PAPER_HEADER = ["run_id", "campaign", "model", "method", "seed", "steps", "regime"]
PAPER_HEADER += list(PAPER_BENCHMARKS)
PAPER_MODELS = ("qwen2.5-math-7b", "llama-3.1-8b", "qwen2.5-1.5b")
#: campaign -> its methods, the reference first (the mixing campaign's is static)
PAPER_CAMPAIGNS = {
    "select": ("baseline", "difffilter", "maxvar", "gfpo", "topk"),
    "reweight": ("baseline", "softmax", "per", "diffband"),
    "mixer": ("static", "reward_gap", "dump_ucb", "tscl", "dump_ucb_difffilter"),
}
#: the method with a true gain in each campaign, in points (the others: none)
PAPER_GAINS = {"difffilter": 3.0, "softmax": 2.0, "reward_gap": 2.0}
#: (model, campaign, regime) -> methods run: every model and campaign without a regime (the
#: cell is empty), long runs for some; the small model's long run has its baseline alone
PAPER_STRATA = {
    **{(m, c, ""): ms for m in PAPER_MODELS for c, ms in PAPER_CAMPAIGNS.items()},
    ("qwen2.5-math-7b", "select", "long"): PAPER_CAMPAIGNS["select"],
    ("llama-3.1-8b", "select", "long"): PAPER_CAMPAIGNS["select"],
    ("qwen2.5-math-7b", "reweight", "long"): PAPER_CAMPAIGNS["reweight"],
    ("qwen2.5-1.5b", "select", "long"): ("baseline",),
}
PAPER_SEEDS = 3


def paper_records(rng_seed: int = 0) -> list[dict]:
    """The paper-sized release's rows as dicts over `PAPER_HEADER` (171 runs, scores in percent
    with one decimal, rows shuffled)."""
    rng = np.random.default_rng(rng_seed)
    base = {b: 15 + 70 * rng.random() for b in PAPER_BENCHMARKS}
    rows = []
    for (model, campaign, regime), methods in PAPER_STRATA.items():
        shift = {"qwen2.5-math-7b": 6.0, "llama-3.1-8b": 0.0, "qwen2.5-1.5b": -8.0}[model]
        shift += 2.0 if regime == "long" else 0.0
        for seed in range(PAPER_SEEDS):
            seed_noise = {b: rng.normal(0, 2.0) for b in PAPER_BENCHMARKS}
            for method in methods:
                row = {
                    "campaign": campaign,
                    "model": model,
                    "method": method,
                    "seed": seed,
                    "steps": 1000 if regime == "long" else 500,
                    "regime": regime,
                }
                gain = PAPER_GAINS.get(method, 0.0)
                own = 0.0 if method == methods[0] else 0.8
                for b in PAPER_BENCHMARKS:
                    v = base[b] + shift + seed_noise[b] + gain + rng.normal(0, own)
                    row[b] = f"{min(100.0, max(0.0, round(v, 1))):.1f}"
                rows.append(row)
    out = [rows[i] for i in rng.permutation(len(rows))]
    for k, r in enumerate(out):
        r["run_id"] = f"run-{k:03d}"
    return out


def write_paper_csv(path: Path, records: list[dict] | None = None) -> Path:
    """`paper_records` (or ``records``) as a CSV over `PAPER_HEADER`."""
    records = paper_records() if records is None else records
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=PAPER_HEADER)
        w.writeheader()
        w.writerows(records)
    return path
