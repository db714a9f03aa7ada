"""The engine's view of `dataflex_rl.tasks`: building task sets, prompts, charsets, rewards.

Everything the engine needs from the tasks package goes through here, so the rest of the engine
depends on five small functions rather than on the task classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def build_tasks(domains: Sequence[str], seed: int, **options: Any):
    """``dataflex_rl.tasks.build_taskset(domains=..., seed=..., **options)``."""
    try:
        from dataflex_rl.tasks import build_taskset
    except ImportError:  # the package may export it only from its base module
        from dataflex_rl.tasks.base import build_taskset

    return build_taskset(domains=tuple(domains), seed=seed, **options)


def domain_names(taskset) -> tuple[str, ...]:
    """Domain names of ``taskset``, in id order."""
    return tuple(taskset.domains)


def taskset_charset(taskset) -> list[str]:
    """Characters any prompt or answer of ``taskset`` may contain."""
    return sorted(set(taskset.charset()))


def train_pairs(taskset) -> tuple[list[str], list[str], list[int]]:
    """All training-pool (prompt, answer) pairs with their domain index, domain by domain."""
    prompts, answers, groups = [], [], []
    for i, d in enumerate(taskset.domains):
        prompts.extend(p.prompt for p in taskset.train[d])
        answers.extend(p.answer for p in taskset.train[d])
        groups.extend([i] * len(taskset.train[d]))
    return prompts, answers, groups


def warm_pairs(taskset) -> tuple[list[str], list[str], list[int]]:
    """Warm-start (prompt, answer, domain index) triples, domain by domain.

    A domain's triples are its warm split (``taskset.warm``: drawn from the same
    de-duplicated stream as the held-out set and the GRPO pool, disjoint from both, so GRPO's
    prompts are new to the policy); a domain with an empty warm split (``warm_size`` 0, or a
    task set loaded from files) gives its training pool instead.
    """
    prompts, answers, groups = [], [], []
    warm = getattr(taskset, "warm", {})
    for i, d in enumerate(taskset.domains):
        problems = warm.get(d) or taskset.train[d]
        prompts.extend(p.prompt for p in problems)
        answers.extend(p.answer for p in problems)
        groups.extend([i] * len(problems))
    return prompts, answers, groups


def score(taskset, problems: Sequence, responses: Sequence[str]) -> Tensor:
    """[B] float rewards, ``taskset.verify(problem, response)`` forced to 0/1."""
    # the verifiers are Python; one call per response is unavoidable here
    return torch.tensor(
        [1.0 if float(taskset.verify(p, r)) >= 1.0 else 0.0 for p, r in zip(problems, responses)],
        dtype=torch.float32,
    )
