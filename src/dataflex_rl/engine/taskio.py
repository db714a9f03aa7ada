"""The engine's view of `dataflex_rl.tasks`: building task sets, prompts, charsets, rewards.

Everything the engine needs from the tasks package goes through here, so the rest of the engine
depends on five small functions rather than on the task classes.
"""

from __future__ import annotations

from typing import Any, Sequence

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


def warm_pairs(taskset, per_domain: int, seed: int) -> tuple[list[str], list[str], list[int]]:
    """Warm-start (prompt, answer, domain index) triples drawn fresh from the generators,
    disjoint from the held-out sets *and* the GRPO training pools (so GRPO's prompts are new
    to the policy).

    Args:
        per_domain: problems per domain (fewer when a domain runs out of distinct prompts);
            0 means "train on the GRPO pools themselves".
        seed: generator seed of the warm-start problems.
    """
    if per_domain == 0:
        return train_pairs(taskset)
    prompts, answers, groups = [], [], []
    for i, d in enumerate(taskset.domains):
        for p in taskset.sample_train(d, per_domain, seed, disjoint_from_pool=True,
                                      allow_fewer=True):
            prompts.append(p.prompt)
            answers.append(p.answer)
            groups.append(i)
    return prompts, answers, groups


def score(taskset, problems: Sequence, responses: Sequence[str]) -> Tensor:
    """[B] float rewards, ``taskset.verify(problem, response)`` forced to 0/1."""
    # the verifiers are Python; one call per response is unavoidable here
    return torch.tensor([1.0 if float(taskset.verify(p, r)) >= 1.0 else 0.0
                         for p, r in zip(problems, responses)], dtype=torch.float32)
