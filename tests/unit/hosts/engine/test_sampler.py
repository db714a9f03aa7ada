"""The group sampler: shapes, EOS handling, one prefill per prompt, seeds, greedy == HF."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.sampler import left_pad, positions, sample_groups


def _prompts(tok, texts):
    return [[tok.bos_id] + tok.encode(t) for t in texts]


def test_left_pad_and_positions():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    assert positions(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    with pytest.raises(ValueError, match="empty"):
        left_pad([[1], []], pad_id=0)


def test_shapes_grouping_and_masks(small_policy, char_tokenizer):
    tok = char_tokenizer
    r = sample_groups(
        small_policy.model,
        _prompts(tok, ["1+2=", "3?", "10+20="]),
        4,
        5,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        generator=torch.Generator().manual_seed(0),
    )
    assert r.response_ids.shape[0] == 12 and r.response_ids.shape[1] <= 5
    assert r.prompt_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert r.group_size == 4
    # after EOS: pad ids, mask False, log-prob 0; before: mask True, log-prob <= 0
    m = r.response_mask
    eos_seen = (r.response_ids == tok.eos_id).long().cumsum(1)
    after = torch.cat([torch.zeros(12, 1, dtype=torch.long), eos_seen[:, :-1]], 1) > 0
    assert torch.equal(m, ~after)
    assert bool((r.response_ids[~m] == tok.pad_id).all())
    assert bool((r.old_log_probs[~m] == 0).all()) and bool((r.old_log_probs[m] <= 0).all())
    assert torch.equal(r.finished, (r.response_ids == tok.eos_id).any(1))


def test_each_prompt_is_prefilled_once(small_policy, char_tokenizer):
    tok = char_tokenizer
    shapes = []
    hook = small_policy.model.register_forward_pre_hook(
        lambda mod, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        sample_groups(
            small_policy.model,
            _prompts(tok, ["1+2=", "3?"]),
            8,
            4,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            generator=torch.Generator().manual_seed(0),
        )
    finally:
        hook.remove()
    # one prefill of the 2 prompts (not 16 copies), then one-token steps of 16 rows
    assert shapes[0] == (2, 5)
    assert all(s == (16, 1) for s in shapes[1:])


def test_same_generator_state_same_samples(small_policy, char_tokenizer):
    tok = char_tokenizer
    args = (small_policy.model, _prompts(tok, ["1+2=", "a?b"]), 6, 6)
    kw = dict(eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.3)
    a = sample_groups(*args, **kw, generator=torch.Generator().manual_seed(7))
    b = sample_groups(*args, **kw, generator=torch.Generator().manual_seed(7))
    c = sample_groups(*args, **kw, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.old_log_probs, b.old_log_probs)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_greedy_matches_hf_generate(small_policy, char_tokenizer):
    tok = char_tokenizer
    prompts = _prompts(tok, ["12+3=", "7?", "c-b+a="])
    r = sample_groups(
        small_policy.model, prompts, 2, 6, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=0.0
    )
    # greedy: both samples of a prompt agree
    assert torch.equal(r.response_ids[0::2], r.response_ids[1::2])
    ids, mask = left_pad(prompts, tok.pad_id)
    with torch.no_grad():
        hf = small_policy.model.generate(
            input_ids=ids,
            attention_mask=mask.long(),
            do_sample=False,
            max_new_tokens=6,
            eos_token_id=tok.eos_id,
            pad_token_id=tok.pad_id,
        )
    hf = hf[:, ids.shape[1] :]
    ours = r.response_ids[0::2]
    for row_h, row_o in zip(hf.tolist(), ours.tolist()):
        n = len(row_o)
        assert row_h[:n] == row_o[: len(row_h[:n])]


def test_bad_arguments(small_policy, char_tokenizer):
    with pytest.raises(ValueError, match="group_size"):
        sample_groups(small_policy.model, [[1]], 0, 4, eos_id=2, pad_id=0)
