"""The engine's view of `dataflex_rl.tasks` (task sets, prompts, charsets, rewards): the rest
of the engine depends on these small functions rather than on the task classes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


def build_tasks(domains: Sequence[str], seed: int, **options: Any):
    """``dataflex_rl.tasks.build_taskset(domains=..., seed=..., **options)``."""
    from dataflex_rl.tasks import build_taskset

    return build_taskset(domains=tuple(domains), seed=seed, **options)


def taskset_charset(taskset) -> list[str]:
    """Characters any prompt or answer of ``taskset`` may contain."""
    return sorted(set(taskset.charset()))


def warm_pairs(taskset) -> tuple[list[str], list[str], list[int]]:
    """Warm-start (prompt, answer, domain index) triples, domain by domain: a domain's warm
    split (disjoint from its held-out set and GRPO pool), or its training pool when empty."""
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


def load_file_tasks(tasks_config):
    """The `TaskSet` of a ``source: files`` tasks config (`load_dataset`, which raises
    `ConfigError` for bad files, columns or verifiers)."""
    from dataflex_rl.tasks.datasets import default_eval_split, load_dataset

    t = tasks_config
    held_out_given = t.eval is not None or default_eval_split(t.train) is not None
    return load_dataset(
        t.train,
        t.domain_key,
        eval_path=t.eval,
        eval_fraction=0.0 if held_out_given else t.eval_fraction,
        seed=t.eval_seed,
        verifier=dict(t.verifiers),
        prompt_column=t.prompt_column,
        answer_column=t.answer_column,
    )


def dataset_identity(tasks_config) -> dict[str, list[dict[str, str]]] | None:
    """Path and content SHA-256 of every training and held-out source of a ``source: files``
    config (None for generated tasks); a run records it, and resuming refuses a changed one."""
    from dataflex_rl.tasks.datasets import content_sha256

    t = tasks_config
    if t.source != "files":
        return None
    out = {}
    for role in ("train", "eval"):
        value = getattr(t, role)
        paths = [] if value is None else [value] if isinstance(value, str) else list(value)
        out[role] = [{"path": str(Path(p).resolve()), "sha256": content_sha256(p)} for p in paths]
    return out


def fit_to_context(taskset, encode, context: int | None, max_new_tokens: int):
    """``(taskset, report)``: a copy without the problems whose prompt does not fit
    ``1 + len(encode(prompt)) + max_new_tokens <= context`` (None: no limit), and per split and
    domain the prompts ``dropped`` and the kept answers longer than the budget (``long_answers``).

    Raises:
        ConfigError: a domain has no training or no held-out prompt left.
    """
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.tasks.base import TaskSet

    limit = None if context is None else context - 1 - max_new_tokens
    report: dict[str, dict[str, dict[str, int]]] = {"dropped": {}, "long_answers": {}}
    pools = {}
    for split in ("train", "eval"):
        pools[split] = {}
        for d in taskset.domains:
            problems = getattr(taskset, split).get(d, [])
            fits = [limit is None or len(encode(p.prompt)) <= limit for p in problems]
            kept = [p for p, ok in zip(problems, fits) if ok]
            long_answers = sum(len(encode(p.answer)) + 1 > max_new_tokens for p in kept)
            report["dropped"].setdefault(split, {})[d] = len(problems) - len(kept)
            report["long_answers"].setdefault(split, {})[d] = long_answers
            if problems and not kept:
                raise ConfigError(
                    f"tasks: no {split} prompt of domain {d!r} fits the policy's context of "
                    f"{context} tokens with grpo.max_new_tokens={max_new_tokens} (a prompt may "
                    f"have at most {limit} tokens); shorten the prompts or lower max_new_tokens"
                )
            pools[split][d] = kept
    fitted = TaskSet(taskset.domains, pools["train"], pools["eval"], taskset.handlers, taskset.warm)
    return fitted, report


def unknown_characters(taskset, tokenizer) -> dict[str, dict[str, int]]:
    """Per domain, the held-out prompts and answers with characters a character tokenizer
    lacks, and the characters (empty for other tokenizers)."""
    chars = getattr(tokenizer, "chars", None)
    if chars is None:
        return {}
    known = set(chars)
    out = {}
    for d in taskset.domains:
        problems = taskset.eval.get(d, [])
        bad_prompts = sum(not set(p.prompt) <= known for p in problems)
        bad_answers = sum(not set(p.answer) <= known for p in problems)
        if bad_prompts or bad_answers:
            missing = sorted(set().union(*(set(p.prompt + p.answer) for p in problems)) - known)
            out[d] = {"prompts": bad_prompts, "answers": bad_answers, "chars": "".join(missing)}
    return out


def train_charset(taskset) -> list[str]:
    """Characters of the training prompts and answers."""
    chars: set[str] = set()
    for d in taskset.domains:
        for p in taskset.train.get(d, []):
            chars.update(p.prompt)
            chars.update(p.answer)
    return sorted(chars)
