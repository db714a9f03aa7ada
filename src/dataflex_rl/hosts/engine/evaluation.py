"""Held-out evaluation per domain: greedy accuracy and sampled accuracy (mean over samples)."""

from __future__ import annotations

from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.hosts.engine.noise import row_keys
from dataflex_rl.hosts.engine.policy import Policy
from dataflex_rl.hosts.engine.sampler import sample_groups
from dataflex_rl.hosts.engine.taskio import score

#: prompts per generation call during evaluation
EVAL_CHUNK = 256


def generate_texts(
    policy: Policy,
    problems: list,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    noise_base: int = 0,
) -> list[str]:
    """Decoded responses, ``samples`` per problem (grouped by problem), in chunks; the
    sampling noise is keyed by each problem's key, so chunking changes nothing."""
    tok = policy.tokenizer
    out: list[str] = []
    for i in range(0, len(problems), EVAL_CHUNK):
        chunk = problems[i : i + EVAL_CHUNK]
        keys = None if temperature <= 0 else [p.key for p in chunk]
        r = sample_groups(
            policy.model,
            [[tok.bos_id] + tok.encode(p.prompt) for p in chunk],
            samples,
            max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=temperature,
            noise_keys=None if keys is None else row_keys(noise_base, -1, keys, samples),
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
    """Accuracy on the first ``per_domain`` (None: all) held-out problems of every domain:
    ``eval/{domain}/greedy``, ``eval/{domain}/sampled`` (mean over ``samples`` responses; 0:
    none, noise keyed by ``seed``) and their unweighted means ``eval/mean/{greedy,sampled}``."""
    metrics: dict[str, float] = {}
    for domain, problems in taskset.eval.items():
        name = metric_domain(domain)
        problems = list(problems)[:per_domain] if per_domain else list(problems)
        greedy = generate_texts(policy, problems, 1, 0.0, max_new_tokens)
        metrics[f"eval/{name}/greedy"] = float(score(taskset, problems, greedy).mean())
        if samples > 0:
            texts = generate_texts(policy, problems, samples, temperature, max_new_tokens, seed)
            rep = [p for p in problems for _ in range(samples)]
            metrics[f"eval/{name}/sampled"] = float(score(taskset, rep, texts).mean())
    for kind in ("greedy", "sampled"):
        vals = [v for k, v in metrics.items() if k.endswith(f"/{kind}")]
        if vals:
            metrics[f"eval/mean/{kind}"] = sum(vals) / len(vals)
    return metrics
