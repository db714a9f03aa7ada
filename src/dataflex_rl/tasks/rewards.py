"""Rewards for verl (`compute_score`) and TRL (`correct`): each row of ``dataflex-rl export
tasks`` scored 1.0 or 0.0 by its domain's own rule (`dataflex_rl.tasks.verifiers.DomainVerifier`,
what the engine scores with). Wiring: docs/hosts/verl.md, docs/hosts/trl.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.verifiers import DomainVerifier


def row_domain(data_source: Any, extra_info: Mapping[str, Any] | None = None) -> str:
    """The domain of a row: ``extra_info["domain"]`` when present, else ``data_source``.

    Raises:
        ConfigError: the row names no domain.
    """
    domain = (extra_info or {}).get("domain") or data_source
    if not domain:
        raise ConfigError(
            "reward: the row names no domain (neither extra_info.domain nor data_source)"
        )
    return str(domain)


def compute_score(
    data_source: str,
    solution_str: str | None,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **_verl_extras: Any,
) -> float:
    """verl's custom reward: 1.0 when ``solution_str`` is a correct answer, else 0.0.

    The domain is ``extra_info["domain"]``, else ``data_source``; ConfigError when it is not
    a registered one. Other keywords verl passes are not read.
    """
    return DomainVerifier(domain=row_domain(data_source, extra_info))(solution_str, ground_truth)


def correct(
    prompts: Sequence[Any], completions: Sequence[Any], reward_model: Sequence[Mapping], **columns
) -> list[float]:
    """TRL reward function: 1.0 per completion that is a correct answer, else 0.0.

    Reads ``reward_model``'s ``ground_truth`` and the domain (the ``domain`` column, else
    ``extra_info.domain``, else ``data_source``) of the columns TRL passes; a chat completion
    is scored by its last message's content.
    """
    n = len(completions)
    domains = columns.get("domain") or [
        row_domain(s, e)
        for s, e in zip(
            columns.get("data_source") or [None] * n, columns.get("extra_info") or [None] * n
        )
    ]
    verifiers = {d: DomainVerifier(domain=str(d)) for d in set(domains)}
    return [
        verifiers[d](_content(c), truth["ground_truth"])
        for d, c, truth in zip(domains, completions, reward_model)
    ]


def _content(completion: Any) -> str:
    """The text of a completion: itself, or the last chat message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    return ""
