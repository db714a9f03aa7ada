"""The GRPO step on a small untrained policy: row skipping is exact, state round-trips."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.batch import grpo_batch, reward_metrics, zero_variance_metrics
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config
from dataflex_rl.hosts.engine.loss import masked_token_mean, policy_loss, response_log_probs
from dataflex_rl.hosts.engine.noise import derive_seed
from dataflex_rl.hosts.engine.policy import build_tiny_policy
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from tests.states import assert_moved

from .conftest import SMALL_ARCH


@pytest.fixture(scope="module")
def tasks():
    return tasks_from_config(load_config({"tasks": {"train_size": 30, "eval_size": 5}}))


def make_trainer(taskset, strategy="baseline", seed=0, **cfg):
    config = load_config(
        {
            "grpo": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4},
            "tasks": {"train_size": 30, "eval_size": 5},
            **cfg,
        }
    )
    policy = build_tiny_policy(CharTokenizer.from_charset(taskset.charset()), 0, **SMALL_ARCH)
    return EmbeddedTrainer(config, strategy, seed=seed, taskset=taskset, policy=policy)


def test_derive_seed_is_stable_and_separates_streams():
    assert derive_seed(0, "rollout") == derive_seed(0, "rollout")
    assert len({derive_seed(0, "rollout"), derive_seed(0, "data"), derive_seed(1, "rollout")}) == 3
    assert 0 <= derive_seed(123, "x") < 2**31


def test_batch_passes_the_exact_per_response_advantages(tasks):
    # GRPO outcome advantages are one value per response: the batch carries them (and the
    # lengths) so decisions read B values; the token tensor (for the loss) holds the same value
    tr = make_trainer(tasks, "softmax")
    problems, domain_idx, _ = tr.driver.draw(tr.config.grpo.prompts_per_step, 0)
    rollout, rewards, _, _ = tr.generation(0).rollout(problems)
    batch = grpo_batch(rollout, rewards, problems, domain_idx, tr.domains, 0, tr.config.grpo)
    mask = rollout.response_mask
    assert torch.equal(batch.response_lengths, mask.sum(1))
    assert batch.response_advantages.dtype == torch.float32
    assert torch.equal(batch.advantages, batch.response_advantages[:, None] * mask)
    # the decision reads no [B, T] advantage: NaN tokens there would make every row invalid
    poisoned = batch.replace(advantages=torch.full_like(batch.advantages, float("nan")))
    d, p = (
        tr.driver.strategy.decide(batch),
        make_trainer(tasks, "softmax").driver.strategy.decide(poisoned),
    )
    assert p.metrics["dataflex/invalid_responses"] == 0
    assert torch.equal(d.weights_per_response, p.weights_per_response)


def test_skipping_zero_signal_rows_gives_the_full_batch_gradient(tasks):
    tr = make_trainer(tasks)
    model = tr.policy.model
    problems, _, _ = tr.driver.draw(tr.config.grpo.prompts_per_step, 0)
    rollout, _, _, _ = tr.generation(0).rollout(problems)
    B = rollout.response_ids.shape[0]
    adv = torch.zeros(B, rollout.response_ids.shape[1])
    adv[::3] = 1.0  # only every third row has a signal
    adv = adv * rollout.response_mask
    w = rollout.response_mask.float()
    mask = rollout.response_mask
    pidx = rollout.prompt_index

    def grads(rows):
        model.zero_grad()
        lp = response_log_probs(
            model,
            rollout.prompt_ids[pidx][rows],
            rollout.prompt_mask[pidx][rows],
            rollout.response_ids[rows],
            mask[rows],
        )
        per_token, _ = policy_loss(lp, rollout.old_log_probs[rows], adv[rows], mask[rows])
        loss = masked_token_mean(per_token * w[rows], mask[rows], num_tokens=mask.sum())
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    full = grads(torch.arange(B))
    part = grads(torch.arange(0, B, 3))
    torch.testing.assert_close(part, full, atol=1e-6, rtol=1e-4)


def test_state_dict_round_trip_continues_identically(tasks):
    a = make_trainer(tasks, "maxvar")
    for _ in range(2):
        a.train_step()
    state = a.state_dict()
    b = make_trainer(tasks, "maxvar")
    # the state moved from a fresh trainer's: step, data order (not the model:
    # the untrained tiny policy solves nothing here, so every advantage is 0)
    fresh = b.state_dict()
    assert state["step"] == 2 and fresh["step"] == 0
    assert_moved(state["dataflex"]["intake"], fresh["dataflex"]["intake"])
    b.load_state_dict(state)
    ma, mb = a.train_step(), b.train_step()
    assert a.parameter_hash() == b.parameter_hash()
    assert ma["train/reward"] == mb["train/reward"]


def test_load_state_dict_rejects_another_seed(tasks):
    state = make_trainer(tasks, seed=0).state_dict()
    with pytest.raises(ValueError, match="seed"):
        make_trainer(tasks, seed=1).load_state_dict(state)


def test_vocabulary_must_cover_the_tasks(tasks):
    from dataflex_rl.core.registry import ConfigError

    config = load_config({"tasks": {"train_size": 30, "eval_size": 5}})
    policy = build_tiny_policy(CharTokenizer.from_charset(["0123"]), 0, **SMALL_ARCH)
    with pytest.raises(ConfigError, match="vocabulary lacks"):
        EmbeddedTrainer(config, "baseline", taskset=tasks, policy=policy)


def test_static_proportions_steer_the_sampler(tasks):
    tr = make_trainer(tasks, tasks={"train_size": 30, "eval_size": 5, "proportions": {"math": 1.0}})
    _, domain_idx, metrics = tr.driver.draw(tr.config.grpo.prompts_per_step, 0)
    assert domain_idx == [0, 0, 0, 0]
    assert metrics["dataflex/mix/domain/math/actual"] == 1.0
    assert metrics["dataflex/mix/domain/math/target"] == 1.0


def test_kl_term_uses_a_frozen_reference(tasks):
    tr = make_trainer(
        tasks, grpo={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4, "kl_coef": 0.1}
    )
    assert tr.learner.ref_model is not None
    assert not any(p.requires_grad for p in tr.learner.ref_model.parameters())
    m = tr.train_step()
    assert "loss/kl" in m or m.get("engine/empty_update") == 1.0


def test_load_state_dict_rejects_a_changed_config(tasks):
    state = make_trainer(tasks).state_dict()
    other = make_trainer(tasks, optim={"lr": 1e-3})
    with pytest.raises(ValueError, match="differs from the checkpoint's in optim"):
        other.load_state_dict(state)


def test_warns_when_the_policy_was_warm_started_beside_another_split(tasks, tmp_path):
    import dataclasses
    import json
    import warnings

    from dataflex_rl.hosts.engine.config import default_difficulty

    config = load_config({"tasks": {"train_size": 30, "eval_size": 5}})
    t = config.tasks
    boot = {
        "domains": list(t.domains),
        "task_seed": t.seed,
        "train_size": t.train_size,
        "eval_size": t.eval_size,
        "eval_seed": t.eval_seed,
        "difficulty": default_difficulty(t.domains),
        "warm_size": t.warm_size,
        "seed": 3,
    }
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"bootstrap_args": boot}))
    small = build_tiny_policy(CharTokenizer.from_charset(tasks.charset()), 0, **SMALL_ARCH)
    policy = dataclasses.replace(small, source=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same split (and a null difficulty): no warning
        EmbeddedTrainer(config, "baseline", taskset=tasks, policy=policy)
    boot.update(warm_size=1000, eval_seed=4)
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"bootstrap_args": boot}))
    with pytest.warns(
        UserWarning,
        match=r"tasks\.eval_seed: 0 \(bootstrap: 4\); "
        r"tasks\.warm_size: 0 \(bootstrap: 1000\)",
    ) as rec:
        EmbeddedTrainer(config, "baseline", taskset=tasks, policy=policy)
    assert len(rec) == 1 and "Held-out prompts may have been seen" in str(rec[0].message)


def test_optimizer_is_chosen_by_name_with_its_settings(tasks):
    sgd = make_trainer(tasks, optim={"name": "sgd", "lr": 0.05, "momentum": 0.5})
    assert type(sgd.learner.optimizer) is torch.optim.SGD
    group = sgd.learner.optimizer.param_groups[0]
    assert group["lr"] == 0.05 and group["momentum"] == 0.5
    adam = make_trainer(tasks, optim={"name": "adamw", "lr": 1e-4, "betas": [0.8, 0.99]})
    assert type(adam.learner.optimizer) is torch.optim.AdamW
    assert adam.learner.optimizer.param_groups[0]["betas"] == (0.8, 0.99)
    with pytest.raises(Exception, match="optim.name"):
        load_config({"optim": {"name": "adam"}})


def test_global_rngs_are_seeded_from_the_run_seed(tasks):
    import random

    import numpy as np

    from dataflex_rl.hosts.engine.checkpoint import global_rng_state

    torch.manual_seed(12345)  # whatever the process held before
    make_trainer(tasks, seed=3)
    s = derive_seed(3, "global")
    assert torch.initial_seed() == s
    want = torch.rand(3, generator=torch.Generator().manual_seed(s))
    assert torch.equal(torch.rand(3), want)
    assert random.random() == random.Random(s).random()
    assert np.random.random() == np.random.RandomState(s).random_sample()
    # two trainers of one seed, built after different global draws, hold the same state
    torch.rand(7)
    a = make_trainer(tasks, seed=3)
    first = global_rng_state()
    a.train_step()
    torch.rand(11)
    b = make_trainer(tasks, seed=3)
    assert torch.equal(global_rng_state()["torch"], first["torch"])
    assert b.state_dict()["rng"]["python"] == first["python"]


def test_the_strategy_recomputes_with_the_engines_adv_eps(tasks):
    t = make_trainer(
        tasks, grpo={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4, "adv_eps": 0.01}
    )
    assert t.driver.strategy.adv_eps == 0.01
    assert make_trainer(tasks).driver.strategy.adv_eps == 1e-6


def test_step_figures_by_hand():
    # two prompts of domains 1 and 0, G = 2: rewards [1, 0 | 1, 1]; lengths [2, 1 | 3, 0]
    from types import SimpleNamespace

    from dataflex_rl.core.batch import RolloutBatch

    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    rollout = SimpleNamespace(
        prompt_index=torch.tensor([0, 0, 1, 1]),
        response_mask=mask,
        finished=torch.tensor([True, True, False, True]),
        num_tokens=6,
    )
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    m = reward_metrics(rewards, [1, 0], rollout, ("a", "b"))
    assert m["train/reward"] == 0.75 and m["train/response_length"] == 1.5
    assert m["train/truncated_fraction"] == 0.25 and m["engine/tokens_generated"] == 6.0
    assert m["train/a/reward"] == 1.0 and m["train/b/reward"] == 0.5
    batch = RolloutBatch(
        rewards=rewards, response_mask=mask, group_ids=rollout.prompt_index, advantages=None
    )
    # group 1 (rewards 1, 1) has no signal: its 3 tokens are what an oracle skip saves
    z = zero_variance_metrics(batch)
    assert z == {"engine/tokens_zero_variance": 3.0, "engine/groups_effective": 1.0}
