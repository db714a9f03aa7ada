"""Task domains of the embedded engine: generators, exact 0/1 verifiers, dataset loading.

Built-in domains (registered in `DOMAINS`): ``math`` (integer arithmetic), ``logic`` (ordering
puzzles / boolean formulas), ``science`` (physics laws and unit conversions), and
``rg_arithmetic`` (reasoning-gym's ``basic_arithmetic``, needs ``reasoning-gym``).

    from dataflex_rl.tasks import build_taskset
    tasks = build_taskset(("math", "logic"), train_size=2000, difficulty={"math": 3})
    p = tasks.eval["math"][0]
    tasks.verify(p, p.answer)  # 1.0
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
