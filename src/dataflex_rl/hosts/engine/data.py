"""A run's tasks, checked against its policy before anything is trained: generated tasks
against its vocabulary and warm-start split, a loaded dataset fitted to it (`fit_loaded`)."""

from __future__ import annotations

import warnings
from typing import Any

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import EngineConfig, default_difficulty
from dataflex_rl.hosts.engine.policy import Policy, context_length, extend_vocabulary
from dataflex_rl.hosts.engine.taskio import (
    build_tasks,
    fit_to_context,
    load_file_tasks,
    taskset_charset,
    train_charset,
    unknown_characters,
)
from dataflex_rl.hosts.engine.warmstart import policy_manifest, split_differences


def tasks_from_config(config: EngineConfig):
    """The `TaskSet` described by ``config.tasks``: generated, or loaded from files."""
    t = config.tasks
    if t.source == "files":
        return load_file_tasks(t)
    difficulty = default_difficulty(t.domains) if t.difficulty is None else t.difficulty
    return build_tasks(
        t.domains,
        t.seed,
        train_size=t.train_size,
        eval_size=t.eval_size,
        eval_seed=t.eval_seed,
        difficulty=difficulty,
        warm_size=t.warm_size,
    )


def vocabulary(policy: Policy) -> list[str] | None:
    """A character tokenizer's characters (None for other tokenizers)."""
    return list(getattr(policy.tokenizer, "chars", [])) or None


def check_generated(taskset, policy: Policy, config: EngineConfig) -> None:
    """Raise `ConfigError` when a character vocabulary lacks characters the tasks use; warn
    when the policy's bootstrap MANIFEST records another task split than ``config.tasks``."""
    chars = getattr(policy.tokenizer, "chars", None)
    missing = [] if chars is None else sorted(set(taskset_charset(taskset)) - set(chars))
    if missing:
        raise ConfigError(
            f"policy {policy.source!r}: its character vocabulary lacks {missing} "
            f"used by domains {list(taskset.domains)}; bootstrap a policy for these "
            "domains ('dataflex-rl bootstrap')"
        )
    manifest = policy_manifest(policy.source)
    differ = split_differences(manifest, config.tasks) if manifest is not None else {}
    if differ:
        what = "; ".join(
            f"tasks.{k}: {ours!r} (bootstrap: {theirs!r})" for k, (ours, theirs) in differ.items()
        )
        warnings.warn(
            f"policy {policy.source!r} was warm-started beside another task "
            f"split: {what}. Held-out prompts may have been seen in the warm "
            "start; set these tasks settings to the bootstrap's (its "
            "MANIFEST.json, bootstrap_args)",
            UserWarning,
            stacklevel=3,
        )


def fit_loaded(taskset, policy: Policy, max_new_tokens: int) -> tuple[Any, dict[str, Any]]:
    """A loaded dataset fitted to the policy: (the task set, what was added, dropped and
    unknown); a character vocabulary is extended in place. One warning per finding."""
    added = extend_vocabulary(policy, train_charset(taskset))
    tok = policy.tokenizer
    context = context_length(policy)
    taskset, report = fit_to_context(taskset, tok.encode, context, max_new_tokens)
    report["vocabulary_added"] = "".join(added)
    report["eval_unknown_characters"] = unknown_characters(taskset, tok)
    findings = [
        f"tasks.{split}: dropped prompts too long for the policy's context of "
        f"{context} tokens with grpo.max_new_tokens={max_new_tokens}: {_counts(per_domain)}"
        for split, per_domain in report["dropped"].items()
        if any(per_domain.values())
    ]
    long = report["long_answers"]["train"]
    if any(long.values()):
        findings.append(
            f"tasks.train: ground truths longer than grpo.max_new_tokens={max_new_tokens}"
            f" tokens (only an equivalent shorter answer can score): {_counts(long)}"
        )
    findings += [
        f"tasks.eval: {found['prompts']} held-out prompts and {found['answers']} "
        f"answers of domain {d!r} use characters not in the training data "
        f"({found['chars']!r}); they are encoded as <unk>, and such an answer cannot "
        "be generated"
        for d, found in report["eval_unknown_characters"].items()
    ]
    for message in findings:
        warnings.warn(message, UserWarning, stacklevel=3)
    return taskset, report


def check_same_data(state: dict[str, Any], dataset: dict | None, policy: Policy) -> None:
    """Raise `ValueError` for a checkpoint taken on other data files (naming them) or another
    character vocabulary."""
    theirs = state.get("dataset")
    if theirs is not None and dataset is not None and theirs != dataset:
        changed = [
            f"{now['path']} (sha256 {then['sha256'][:12]} at the checkpoint, "
            f"{now['sha256'][:12]} now)"
            for role in ("train", "eval")
            for then, now in zip(theirs.get(role, []), dataset.get(role, []))
            if then != now
        ] or ["the list of files"]
        raise ValueError(
            "cannot resume: the dataset changed since the checkpoint: "
            f"{'; '.join(changed)}. Restore the data or start a new run (another --out)"
        )
    if state.get("vocabulary", vocabulary(policy)) != vocabulary(policy):
        raise ValueError(
            "cannot resume: the policy's character vocabulary differs from the checkpoint's"
        )


def _counts(per_domain: dict[str, int]) -> str:
    """``"math 3, logic 1"`` for the non-zero counts."""
    return ", ".join(f"{d} {n}" for d, n in per_domain.items() if n)
