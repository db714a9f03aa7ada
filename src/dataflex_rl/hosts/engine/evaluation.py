"""Held-out evaluation per domain: greedy accuracy and sampled accuracy (mean over samples)."""

from __future__ import annotations

import torch

from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.hosts.engine.noise import row_keys
from dataflex_rl.hosts.engine.policy import Policy
from dataflex_rl.hosts.engine.sampler import sample_groups
from dataflex_rl.hosts.engine.taskio import score

#: prompts per generation call during evaluation
EVAL_CHUNK = 256


def generate_texts(
    policy: Policy,
    prompts: list[str],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    noise_base: int | None = None,
    keys: list[str] | None = None,
) -> list[str]:
    """Decoded responses, ``samples`` per prompt (grouped by prompt), in chunks.

    With ``noise_base`` the sampling noise of each (prompt, sample) is keyed by the prompt's
    key (``keys``, default the prompt text), so it does not depend on chunking or on what
    other responses were; otherwise it comes from ``generator``.
    """
    tok = policy.tokenizer
    keys = list(prompts) if keys is None else keys
    out: list[str] = []
    for i in range(0, len(prompts), EVAL_CHUNK):
        ids = [[tok.bos_id] + tok.encode(p) for p in prompts[i : i + EVAL_CHUNK]]
        nk = (
            None
            if noise_base is None or temperature <= 0
            else row_keys(noise_base, -1, keys[i : i + EVAL_CHUNK], samples)
        )
        r = sample_groups(
            policy.model,
            ids,
            samples,
            max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=temperature,
            generator=generator,
            noise_keys=nk,
        )
        out.extend(tok.decode(row) for row in r.response_ids.tolist())
    return out


def evaluate(
    policy: Policy,
    taskset,
    *,
    per_domain: int | None = None,
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 12,
    seed: int = 0,
) -> dict[str, float]:
    """Accuracy on the held-out split of every domain.

    Args:
        policy: the policy to evaluate (left in eval mode).
        taskset: a task set with ``eval`` problems per domain and ``verify``.
        per_domain: first N held-out problems of each domain (None: all).
        samples: sampled responses per problem at ``temperature`` (0: skip sampled accuracy).
        temperature: sampling temperature of the sampled accuracy.
        max_new_tokens: response budget.
        seed: noise base of the sampled responses: each (problem, sample) has its own keyed
            noise (`noise.row_keys`), the same at every evaluation of the run and in every run
            with this seed.

    Returns:
        ``eval/{domain}/greedy``, ``eval/{domain}/sampled`` (when ``samples > 0``) and the
        unweighted means over domains ``eval/mean/greedy``, ``eval/mean/sampled``; the
        domain as `metric_domain` writes it (``openai/gsm8k`` -> ``openai_gsm8k``).
    """
    metrics: dict[str, float] = {}
    for domain, problems in taskset.eval.items():
        name = metric_domain(domain)
        problems = list(problems)[:per_domain] if per_domain else list(problems)
        prompts = [p.prompt for p in problems]
        greedy = generate_texts(
            policy,
            prompts,
            samples=1,
            temperature=0.0,
            max_new_tokens=max_new_tokens,
            generator=None,
        )
        metrics[f"eval/{name}/greedy"] = float(score(taskset, problems, greedy).mean())
        if samples > 0:
            texts = generate_texts(
                policy,
                prompts,
                samples=samples,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                noise_base=seed,
                keys=[p.key for p in problems],
            )
            rep = [p for p in problems for _ in range(samples)]
            metrics[f"eval/{name}/sampled"] = float(score(taskset, rep, texts).mean())
    for kind in ("greedy", "sampled"):
        vals = [v for k, v in metrics.items() if k.endswith(f"/{kind}")]
        if vals:
            metrics[f"eval/mean/{kind}"] = sum(vals) / len(vals)
    return metrics
