"""`PER_RESPONSE_ESTIMATORS` checked against verl's own estimators: each listed one gives every
valid token of a response the same advantage (so the host may pass one value per response);
token-level estimators are not listed. Runs verl's functions in-process, no Ray."""

import inspect

import pytest

verl = pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from dataflex_rl.hosts.verl.batch import build_batch  # noqa: E402
from dataflex_rl.hosts.verl.config import PER_RESPONSE_ESTIMATORS  # noqa: E402


def _inputs(seed=0, B=16, T=11, G=4):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    rewards = torch.rand(B, generator=g)
    tokens = torch.zeros(B, T)
    tokens[torch.arange(B), lengths - 1] = rewards  # the outcome reward on the last token
    index = np.array([f"u{i // G}" for i in range(B)], dtype=object)
    return tokens, mask, index


def _advantages(name, tokens, mask, index, **extra):
    fn = core_algos.get_adv_estimator_fn(name)
    params = inspect.signature(fn).parameters
    kw = {"token_level_rewards": tokens, "response_mask": mask, **extra}
    if "index" in params:
        kw["index"] = index
    if "config" in params:  # gdpo without its reward keys falls back to one reward
        kw["config"] = None if name == "gdpo" else AlgoConfig()
    return fn(**kw)[0]


def _row_constant(adv, mask):
    first = adv.gather(1, mask.argmax(1, keepdim=True))
    return bool(((adv == first) | (mask == 0)).all())


@pytest.mark.parametrize("name", sorted(PER_RESPONSE_ESTIMATORS))
def test_listed_estimators_give_one_value_per_response(name):
    for seed in range(3):
        tokens, mask, index = _inputs(seed)
        adv = _advantages(name, tokens, mask, index)
        assert _row_constant(adv, mask), name
        # the host's per-response values are verl's, bit for bit
        B = adv.shape[0]
        batch, _ = build_batch(
            keys=[f"{u}_{i}_0" for i, u in enumerate(index)],
            uids=list(index),
            is_padding=[False] * B,
            rm_scores=tokens,
            response_mask=mask.long(),
            advantages=adv,
            old_log_probs=None,
            step=0,
            per_response_advantages=True,
        )
        assert torch.equal(batch.response_advantages, adv[:, 0])


def test_token_level_estimators_are_not_listed():
    tokens, mask, index = _inputs()
    values = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(1))
    gae = _advantages("gae", tokens, mask, index, values=values, gamma=1.0, lam=0.95)
    assert not _row_constant(gae, mask)
    assert "gae" not in PER_RESPONSE_ESTIMATORS
    # reinforce++ discounts the reward back over the tokens (gamma < 1): not one value
    fn = core_algos.get_adv_estimator_fn("reinforce_plus_plus")
    rpp, _ = fn(token_level_rewards=tokens, response_mask=mask, config=AlgoConfig(gamma=0.9))
    assert not _row_constant(rpp, mask)
    assert "reinforce_plus_plus" not in PER_RESPONSE_ESTIMATORS
    assert {"remax", "optimal_token_baseline", "tir_optimal_token_baseline"}.isdisjoint(
        PER_RESPONSE_ESTIMATORS
    )
