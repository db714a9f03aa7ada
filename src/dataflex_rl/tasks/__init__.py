"""Task domains of the embedded engine: generators, exact 0/1 verifiers, dataset loading.

Built-in domains (registered in `DOMAINS`): ``math`` (integer arithmetic), ``logic`` (ordering
puzzles / boolean formulas), ``science`` (physics laws and unit conversions), and
``rg_arithmetic`` (reasoning-gym's ``basic_arithmetic``, needs ``reasoning-gym``).

    from dataflex_rl.tasks import build_taskset
    tasks = build_taskset(("math", "logic"), train_size=1000, difficulty={"math": 4})
    p = tasks.eval["math"][0]
    tasks.verify(p, p.answer)  # 1.0

Each domain's held-out set, training pool and (optional, ``warm_size``) warm-start split are a
random split of one de-duplicated generator stream (see `build_taskset`).
"""

from dataflex_rl.tasks.base import (
    DOMAINS,
    Domain,
    Problem,
    TaskSet,
    build_taskset,
    canonical,
    exact_match,
    make_domain,
)
from dataflex_rl.tasks.datasets import load_dataset, load_problems, save_dataset, to_verl_rows

__all__ = [
    "DOMAINS",
    "Domain",
    "Problem",
    "TaskSet",
    "build_taskset",
    "canonical",
    "exact_match",
    "load_dataset",
    "load_problems",
    "make_domain",
    "save_dataset",
    "to_verl_rows",
]
