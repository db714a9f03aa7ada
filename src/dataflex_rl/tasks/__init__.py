"""Task domains of the embedded engine: generators, exact 0/1 verifiers, dataset loading.

Built-in domains (registered in `DOMAINS`): ``math``, ``logic``, ``science`` and
``rg_arithmetic`` (needs ``reasoning-gym``); `build_taskset` splits one de-duplicated
generator stream per domain into held-out, training and warm-start problems.
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
