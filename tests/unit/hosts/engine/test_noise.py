"""Keyed sampling noise: the hash against a plain-integer oracle, uniformity, the inverse-CDF
draw by hand, and the common-random-numbers property of the sampler."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.hosts.engine.noise import (
    inverse_cdf_draw,
    mix64,
    row_keys,
    text_key,
    uniforms,
)
from dataflex_rl.hosts.engine.sampler import sample_groups

_M64 = (1 << 64) - 1


def mix64_reference(x: int) -> int:
    """`mix64` on one Python integer (the test oracle), result as a signed 64-bit value."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    x ^= x >> 31
    return x - (1 << 64) if x >= 1 << 63 else x


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=50))
def test_mix64_matches_the_integer_oracle(xs):
    got = mix64(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert got == [mix64_reference(x) for x in xs]


def test_mix64_known_value():
    # splitmix64 finalizer of 0 + golden gamma: the first output of splitmix64 seeded with 0
    assert mix64_reference(0) & ((1 << 64) - 1) == 0xE220A8397B1DCDAF


def test_uniforms_are_uniform_and_position_dependent():
    keys = torch.arange(100_000, dtype=torch.int64)
    u = uniforms(keys, 0)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    # mean 1/2 (sd of the mean 0.0009), variance 1/12, deciles ~10% each
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    counts = torch.bincount((u * 10).long(), minlength=10).double() / 1e5
    assert float((counts - 0.1).abs().max()) < 0.006
    v = uniforms(keys, 1)
    assert abs(float(torch.corrcoef(torch.stack([u, v]))[0, 1])) < 0.02


def test_inverse_cdf_draw_by_hand():
    # probabilities 0.1, 0.2, 0.3, 0.4, 0: cumulative 0.1, 0.3, 0.6, 1.0, 1.0
    logp = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]]).log().expand(6, 5)
    u = torch.tensor([0.0, 0.099, 0.1, 0.35, 0.6, 0.999], dtype=torch.float64)
    assert inverse_cdf_draw(logp, u).tolist() == [0, 0, 1, 2, 3, 3]


def test_row_keys_are_distinct_stable_and_keyed_by_occurrence():
    a = row_keys(7, 3, ["math:1+1=", "logic:a?", "math:1+1="], 4)
    assert a.shape == (12,) and len(set(a.tolist())) == 12
    assert torch.equal(a, row_keys(7, 3, ["math:1+1=", "logic:a?", "math:1+1="], 4))
    # a prompt's keys do not depend on the other prompts of the step or their order
    b = row_keys(7, 3, ["logic:a?", "math:1+1="], 4)
    assert torch.equal(a[:4], b[4:]) and torch.equal(a[4:8], b[:4])
    # step, base and sample index all change the key
    assert not set(a.tolist()) & set(row_keys(7, 4, ["math:1+1="], 4).tolist())
    assert not set(a.tolist()) & set(row_keys(8, 3, ["math:1+1="], 4).tolist())
    assert text_key("x") == text_key("x") != text_key("y")


def test_keyed_sampling_ignores_the_rest_of_the_batch(small_policy, char_tokenizer):
    tok = char_tokenizer
    prompts = [[tok.bos_id] + tok.encode(t) for t in ("1+2=", "3?", "10+20=")]
    keys = row_keys(1, 0, ["a", "b", "c"], 3)
    kw = dict(eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.0)
    full = sample_groups(small_policy.model, prompts, 3, 6, noise_keys=keys, **kw)
    alone = sample_groups(small_policy.model, prompts[1:2], 3, 6, noise_keys=keys[3:6], **kw)
    T = int(alone.response_mask.sum(1).max())
    assert torch.equal(full.response_ids[3:6, :T], alone.response_ids[:, :T])


def test_common_random_numbers_couple_two_close_policies(small_policy, char_tokenizer):
    """The point of keyed noise: a slightly different policy mostly draws the same tokens with
    the same keys, and about as often as chance with independent keys."""
    import copy

    tok = char_tokenizer
    other = copy.deepcopy(small_policy.model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.005 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    prompts = [[tok.bos_id] + tok.encode(f"{i}+{i}=") for i in range(10)]
    names = [f"p{i}" for i in range(10)]
    kw = dict(eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.0)
    ka, kb = row_keys(1, 0, names, 8), row_keys(2, 0, names, 8)
    a = sample_groups(small_policy.model, prompts, 8, 1, noise_keys=ka, **kw).response_ids[:, 0]
    same = sample_groups(other, prompts, 8, 1, noise_keys=ka, **kw).response_ids[:, 0]
    indep = sample_groups(other, prompts, 8, 1, noise_keys=kb, **kw).response_ids[:, 0]
    assert float((a == same).float().mean()) > 0.8
    assert float((a == indep).float().mean()) < float((a == same).float().mean()) - 0.3
