"""Result rows (`Row`) and ``results.csv``: one row per run × benchmark × checkpoint.

Reading needs only `REQUIRED`; ``domain`` and ``step`` are optional and other numeric columns
are kept as ``Row.extra`` (the engine's ``greedy`` and ``sampled``), so external results and
the harness's own file read the same way (`results_table.read_results_csv`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dataflex_rl.core.io import atomic_path
from dataflex_rl.core.registry import ConfigError

REQUIRED = ("method", "seed", "benchmark", "score")
COLUMNS = ("method", "seed", "benchmark", "domain", "step", "score")


@dataclass(frozen=True)
class Row:
    """One score (higher is better) of one run on one benchmark at one checkpoint. Runs pair
    by ``seed`` label; ``domain`` "" is the benchmark's own; ``step`` None: only a final score;
    ``extra``: other numeric columns (written, not analyzed)."""

    method: str
    seed: str
    benchmark: str
    score: float
    domain: str = ""
    step: int | None = None
    extra: dict = field(default_factory=dict, compare=False)


def seed_sort_key(seed: str) -> tuple:
    """Numeric seeds in numeric order, before any non-numeric label."""
    return (0, int(seed), "") if seed.lstrip("-").isdigit() else (1, 0, seed)


def scores_are_fractions(scores) -> bool:
    """Every score lies in [0, 1] (accuracies: a report shows them in points, × 100, and asks
    how many seeds a 1-point difference needs); False for no scores."""
    a = np.asarray(list(scores), dtype=float)
    return bool(a.size and np.all((a >= 0) & (a <= 1)))


def final_scores(rows: list[Row]) -> dict[tuple[str, str, str], float]:
    """(method, seed, benchmark) -> score at the run's last checkpoint (ConfigError on two
    rows for the same run, benchmark and step)."""
    best: dict[tuple[str, str, str], Row] = {}
    seen: set[tuple] = set()
    for r in rows:
        key = (r.method, r.seed, r.benchmark)
        if key + (r.step,) in seen:
            raise ConfigError(
                f"duplicate result: method={r.method} seed={r.seed} "
                f"benchmark={r.benchmark} step={r.step}"
            )
        seen.add(key + (r.step,))
        if key not in best or _order(r) > _order(best[key]):
            best[key] = r
    return {k: r.score for k, r in best.items()}


def _order(r: Row) -> int:
    return -1 if r.step is None else r.step


def parse_step(text: str | None, where: str) -> int | None:
    """A checkpoint's step (None for an empty cell; ``"100.0"`` is 100)."""
    if not text:
        return None
    try:
        return int(float(text))
    except ValueError:
        raise ConfigError(f"{where}: step {text!r} is not an integer") from None


def parse_row(raw: dict, where: str) -> Row:
    """A `Row` from one record of a long results CSV (``where`` names it in errors)."""
    values = {k: (v or "").strip() for k, v in raw.items() if k is not None}
    for col in ("method", "seed", "benchmark"):
        if not values[col]:
            raise ConfigError(f"{where}: empty {col!r}")
    values["seed"] = seed_label(values["seed"], where)
    score = _number(values["score"], where, "score")
    step = parse_step(values.get("step"), where)
    extra = {}
    for k, v in values.items():
        if k not in COLUMNS and v:
            try:
                extra[k] = float(v)
            except ValueError:
                pass
    method, seed, benchmark = values["method"], values["seed"], values["benchmark"]
    return Row(method, seed, benchmark, score, values.get("domain", ""), step, extra)


def seed_label(text: str, where: str) -> str:
    """The canonical label of a seed, so runs pair: ``"1.0"``, ``"1e0"``, ``" 1"`` -> ``"1"``;
    ``"s1"`` kept; a non-integral number (``"1.5"``, likely a column mix-up) is a ConfigError
    naming ``where``."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value) or value != int(value):
        raise ConfigError(
            f"{where}: seed {text!r} is not an integer; seeds pair runs across "
            "methods, so they must be integers (or non-numeric labels)"
        )
    return str(int(value))


def _number(text: str, where: str, col: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {col} {text!r} is not a number") from None
    if not math.isfinite(v):
        raise ConfigError(f"{where}: {col} is {text!r}; drop the row instead")
    return v


def write_results_csv(rows: list[Row], path: str | Path) -> Path:
    """Write rows (extra columns after the standard ones, sorted by name)."""
    extras = sorted({k for r in rows for k in r.extra})
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(p) as tmp, tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*COLUMNS, *extras])
        for r in rows:
            extra = [repr(float(r.extra[k])) if k in r.extra else "" for k in extras]
            step = "" if r.step is None else r.step
            w.writerow(
                [r.method, r.seed, r.benchmark, r.domain, step, repr(float(r.score)), *extra]
            )
    return p


#: columns of ``proportions.csv`` (mixers' domain proportions per step)
PROPORTION_COLUMNS = ("method", "seed", "step", "domain", "target", "actual")


def read_proportions_csv(path: str | Path) -> list[dict]:
    """Rows of ``proportions.csv`` (numbers parsed; a missing ``actual`` is NaN)."""
    out = []
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        for r in reader:
            seed = seed_label(r["seed"] or "", f"{path}:{reader.line_num}")
            row = {
                "method": r["method"],
                "seed": seed,
                "step": int(r["step"]),
                "domain": r["domain"],
            }
            out.append(
                {
                    **row,
                    "target": float(r["target"] or "nan"),
                    "actual": float(r["actual"] or "nan"),
                }
            )
    return out
