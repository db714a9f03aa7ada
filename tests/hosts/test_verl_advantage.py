"""select / reweight inside verl: real Ray, TransferQueue, replay buffer and verl's own
`_compute_advantage` (GRPO, rollout correction), then the dataflex step and verl's policy loss.

Groups below have 4 responses; their GRPO advantages are +-0.866 for 2-of-4 (rewards 1,1,0,0:
mean 0.5, unbiased std 0.577 -> 0.5 / 0.577 = 0.866) and 0 for all-equal groups.
"""

import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from tests.hosts.verl_helpers import (  # noqa: E402
    dataflex_trainer,
    put_groups,
    read,
    sample,
    with_driver,
)

pytestmark = pytest.mark.usefixtures("tq_train")

MIXED = [[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]  # 2 informative groups


def by_uid(meta, values):
    """{uid: [rows of that uid, in key order]} for a [B, ...] tensor in meta's row order."""
    out: dict = {}
    for key, v in sorted(zip(meta.keys, values), key=lambda kv: kv[0]):
        out.setdefault(key.rsplit("_", 2)[0], []).append(v)
    return out


def test_difffilter_weights_reach_the_returned_meta():
    trainer = dataflex_trainer("+dataflex.strategy=difffilter")
    uids = put_groups(MIXED)
    batch = sample(4)
    metrics: dict = {}
    out = trainer._compute_advantage(batch, metrics)
    # workers fetch only meta.fields: the new field must be listed there
    assert "rollout_is_weights" in out.fields and sorted(out.keys) == sorted(batch.keys)
    f = read(out, "rollout_is_weights", "response_mask", "loss_mask", "advantages")
    w = by_uid(out, f["rollout_is_weights"].sum(1))
    lengths = by_uid(out, read(batch, "responses")["responses"].ne(0).sum(1))
    for uid, kept in zip(uids, (True, False, False, True)):  # solve rates .5, 1, 0, .5
        expect = lengths[uid] if kept else [0] * 4
        assert [float(x) for x in w[uid]] == [float(x) for x in expect], uid
    # renormalize (difffilter default): dropped rows leave the token-mean denominator
    masks = by_uid(out, f["loss_mask"].sum(1))
    assert [int(x) for x in masks[uids[1]]] == [0, 0, 0, 0]
    assert metrics["dataflex/kept_group_fraction"] == pytest.approx(0.5)
    assert metrics["dataflex/zero_advantage_group_fraction"] == pytest.approx(0.5)


def test_softmax_reweight_composes_with_verls_rollout_correction():
    over = ["algorithm.rollout_correction.rollout_is=token", "+dataflex.strategy=softmax"]
    trainer = dataflex_trainer(*over)
    # verl alone, on a first copy of the data
    put_groups(MIXED, rollout_log_probs=True, seed=1)
    a = sample(4)
    a_out = PPOTrainer._compute_advantage(trainer, a, {})
    assert "rollout_is_weights" in a_out.fields  # verl's truncated token IS weights
    w_verl = by_uid(a_out, read(a_out, "rollout_is_weights")["rollout_is_weights"])
    import transfer_queue as tq

    tq.kv_clear(keys=[*a.keys, *{k.rsplit("_", 2)[0] for k in a.keys}], partition_id="train")
    # the same data again, through the dataflex trainer
    put_groups(MIXED, rollout_log_probs=True, seed=1)
    b = sample(4)
    metrics: dict = {}
    b_out = trainer._compute_advantage(b, metrics)
    w = by_uid(b_out, read(b_out, "rollout_is_weights")["rollout_is_weights"])
    ratios = []
    for uid in w:
        for ours, theirs in zip(w[uid], w_verl[uid]):
            on = theirs > 0
            r = ours[on] / theirs[on]
            assert torch.allclose(r, r[0].expand_as(r), atol=1e-5)  # one factor per response
            ratios.append(float(r[0]))
    # softmax(|A| / 1) over the 8 informative responses, mean 1 there; zero-|A| rows keep 1
    assert metrics["dataflex/composed_rollout_is_weights"] == 1.0
    assert sorted(ratios)[:8] == pytest.approx([1.0] * 8, abs=1e-5)
    assert sorted(ratios)[8:] == pytest.approx([1.0] * 8, abs=1e-5)


def test_padding_rows_from_verl_get_weight_zero():
    trainer = dataflex_trainer("+dataflex.strategy=difffilter")
    put_groups(MIXED[:1] + MIXED[3:])  # 8 responses
    batch = upsample_batch_to_divisible_size(sample(2), 3, eos_token_id=2)  # verl pads to 9
    assert sum(t.get("is_padding", False) for t in batch.tags) == 1
    metrics: dict = {}
    out = trainer._compute_advantage(batch, metrics)
    w = read(out, "rollout_is_weights")["rollout_is_weights"].sum(1)
    pad = [i for i, t in enumerate(batch.tags) if t.get("is_padding")]
    assert float(w[pad[0]]) == 0.0
    assert metrics["dataflex/padding_responses"] == 1 and metrics["dataflex/responses"] == 8


def test_recomputed_advantages_replace_verls():
    trainer = dataflex_trainer("+dataflex.strategy=maxvar")
    put_groups([[1, 1, 0, 0]])
    out = trainer._compute_advantage(sample(1), {})
    adv = read(out, "advantages", "rollout_is_weights")
    a = adv["advantages"][:, 0]
    kept = adv["rollout_is_weights"].sum(1) > 0
    # maxvar keeps one 1 and one 0: mean 0.5, std 0.707 -> +-0.707 (verl had +-0.866)
    assert sorted(a[kept].tolist()) == pytest.approx([-0.7071, 0.7071], abs=1e-3)
    assert a[~kept].abs().sum() == 0


def test_mix_only_strategy_observes_domains_and_leaves_the_loss_alone():
    trainer = dataflex_trainer("+dataflex.strategy=reward_gap", build=False)
    trainer.driver = with_driver(trainer, ["math", "math", "logic", "logic"])
    assert trainer.driver.intake.domains == ("logic", "math")
    trainer.global_steps = 1
    uids = put_groups(MIXED)
    # what _next_train_batch records at submission: uid -> (dataset row, domain id, step)
    domain_id = {0: 1, 1: 1, 2: 0, 3: 0}  # rows 0, 1 are math (id 1), rows 2, 3 logic (id 0)
    trainer._prompts = {u: (row, domain_id[row], 0) for u, row in zip(uids, range(4))}
    batch = sample(4)
    metrics: dict = {}
    out = trainer._compute_advantage(batch, metrics)
    assert "rollout_is_weights" not in out.fields  # mixing acts at intake only
    assert metrics["dataflex/responses"] == 16
    # two groups per domain in this batch
    assert metrics["dataflex/batch/domain/math/actual"] == pytest.approx(0.5)
    assert metrics["dataflex/batch/domain/logic/actual"] == pytest.approx(0.5)


def _loss_and_grad(trainer, meta):
    """verl's vanilla policy loss on exactly the fields a worker would fetch for ``meta``,
    token-mean over ``loss_mask`` as verl's FSDP engine counts it; log-prob = old log-prob."""
    want = ["old_log_probs", "advantages", "response_mask", "loss_mask", "rollout_is_weights"]
    f = read(meta, *[x for x in want if x in meta.fields])
    actor = omega_conf_to_dataclass(trainer.config.actor_rollout_ref.actor)
    actor.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=int(f["loss_mask"].sum()),
        global_batch_size=None,
        loss_scale_factor=None,
    )
    log_prob = f["old_log_probs"].clone().requires_grad_(True)
    loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=f["old_log_probs"],
        log_prob=log_prob,
        advantages=f["advantages"],
        response_mask=f["response_mask"].bool(),
        loss_agg_mode="token-mean",
        config=actor,
        rollout_is_weights=f.get("rollout_is_weights"),
    )
    loss.backward()
    return loss, log_prob.grad, f


LOSS = ("+dataflex.strategy=difffilter", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")


def test_weights_reach_verls_policy_loss():
    trainer = dataflex_trainer(*LOSS)
    put_groups(MIXED)
    out = trainer._compute_advantage(sample(4), {})
    loss, grad, f = _loss_and_grad(trainer, out)
    dropped = f["rollout_is_weights"].sum(1) == 0
    assert bool(dropped.any()) and grad[dropped].abs().sum() == 0
    assert grad[~dropped].abs().sum() > 0
    # token-mean over kept tokens only: loss = -sum(A) / kept tokens at ratio 1
    kept_tokens = int(f["loss_mask"].sum())
    assert kept_tokens == int(f["response_mask"][~dropped].sum())
    expect = -(f["advantages"] * f["response_mask"]).sum() / kept_tokens
    assert loss.item() == pytest.approx(expect.item(), abs=1e-5)


def test_every_response_dropped_gives_zero_gradient():
    trainer = dataflex_trainer(*LOSS)
    put_groups([[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
    with pytest.warns(UserWarning, match="dropped every response"):
        out = trainer._compute_advantage(sample(3), {})
    loss, grad, _ = _loss_and_grad(trainer, out)
    assert loss.item() == 0.0 and grad.abs().sum() == 0
