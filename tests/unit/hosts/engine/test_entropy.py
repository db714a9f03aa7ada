"""The engine fills ``entropies`` from the sampler's logits: equal to a teacher-forced pass,
the same tokens either way, and the high-entropy selection acting in its step."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.sampler import positions, sample_groups

from .test_trainer import make_trainer, tasks  # noqa: F401  (the fixture)


def _prompts(tok, texts):
    return [[tok.bos_id] + tok.encode(t) for t in texts]


def _teacher_forced_entropies(model, r, temperature):
    """[B, T] entropy of softmax(logits / temperature) at each response position, from one
    forward pass over prompt + response (the oracle)."""
    G = r.group_size
    p_ids = r.prompt_ids.repeat_interleave(G, 0)
    p_mask = r.prompt_mask.repeat_interleave(G, 0)
    ids = torch.cat([p_ids, r.response_ids], 1)
    mask = torch.cat([p_mask, r.response_mask], 1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=positions(mask))
    P = p_ids.shape[1]
    logp = torch.log_softmax(logits.logits[:, P - 1 : -1].float() / temperature, -1)
    ent = -(logp.exp() * logp).sum(-1)
    return torch.where(r.response_mask, ent, torch.zeros_like(ent))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_entropies_equal_a_teacher_forced_pass(small_policy, char_tokenizer, temperature):
    tok = char_tokenizer
    kw = dict(eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=temperature)
    prompts = _prompts(tok, ["1+2=", "3?", "10+20="])
    r = sample_groups(
        small_policy.model,
        prompts,
        4,
        6,
        generator=torch.Generator().manual_seed(0),
        entropies=True,
        **kw,
    )
    plain = sample_groups(
        small_policy.model, prompts, 4, 6, generator=torch.Generator().manual_seed(0), **kw
    )
    assert plain.entropies is None
    assert torch.equal(r.response_ids, plain.response_ids)  # asking changes no draw
    assert torch.equal(r.old_log_probs, plain.old_log_probs)
    assert r.entropies.shape == r.response_mask.shape and r.entropies.dtype == torch.float32
    assert bool((r.entropies[~r.response_mask] == 0).all())
    # an untrained policy: entropies near the uniform's, never above ln V
    V = small_policy.model.config.vocab_size
    valid = r.entropies[r.response_mask]
    assert bool((valid > 0.5).all()) and bool((valid <= torch.log(torch.tensor(float(V)))).all())
    expected = _teacher_forced_entropies(small_policy.model, r, temperature)
    torch.testing.assert_close(r.entropies, expected, rtol=1e-4, atol=1e-5)


def test_engine_batch_carries_entropies_only_when_read(tasks):  # noqa: F811
    seen = []
    for strategy in ("baseline", "high_entropy"):
        t = make_trainer(tasks, strategy)
        decide = t.driver.strategy.decide
        t.driver.strategy.decide = lambda b, o=None, decide=decide: (seen.append(b), decide(b, o))[
            1
        ]
        m = t.train_step()
        b = seen[-1]
        assert b.micro_batch_ids is not None and not b.micro_batch_ids.any()  # one pass
        if strategy == "baseline":
            assert b.entropies is None
            assert m["dataflex/kept_token_fraction"] == 1.0
            continue
        assert b.entropies is not None and b.entropies.shape == b.response_mask.shape
        # 20% of the valid tokens (ties at the threshold may keep a few more)
        assert 0.2 <= m["dataflex/kept_token_fraction"] < 0.4
        assert m["dataflex/tokens/active"] == 1.0


def test_high_entropy_state_round_trip_continues_identically(tasks):  # noqa: F811
    a = make_trainer(tasks, "high_entropy")
    a.train_step()
    b = make_trainer(tasks, "high_entropy")
    b.load_state_dict(a.state_dict())
    ma, mb = a.train_step(), b.train_step()
    assert a.parameter_hash() == b.parameter_hash()
    assert ma["dataflex/kept_token_fraction"] == mb["dataflex/kept_token_fraction"]
