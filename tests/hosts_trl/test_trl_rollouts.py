"""Per-prompt rollout budgets on real TRL: ``until_signal`` generates the prompts without
signal again through TRL's own generation, trains on a balanced G per prompt with TRL's
advantages recomputed over it; ``allocate`` and batch-normalized advantages are refused
before the model is built."""

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from tests.hosts_trl.tiny import tiny_dataset  # noqa: E402
from tests.hosts_trl.trainers import (  # noqa: E402
    Recorder,
    dataflex_trainer,
    logged,
    record_trl_generations,
)

R = "dataflex/rollouts/"
G = 4


def test_allocate_and_batch_advantages_are_refused_before_anything_is_built(tmp_path):
    # the trainer checks the block against the args before GRPOTrainer builds anything
    with pytest.raises(ConfigError, match=r"rollouts\.mode: 'allocate'.*RepeatSampler"):
        dataflex_trainer(tmp_path, "knapsack_rl")
    with pytest.raises(ConfigError, match=r"rollouts\.mode: 'sequential'.*RepeatSampler"):
        dataflex_trainer(tmp_path, "adaptive_rollout")
    with pytest.raises(ConfigError, match=r"rollouts\.mode: 'until_signal'.*'batch'"):
        dataflex_trainer(tmp_path, "reinforce_ada", scale_rewards="batch")


def balanced(rewards: list[float], size: int) -> list[float]:
    """A plain loop of the rule: of a pool's rewards (round order), the first
    ceil(size / 2) above its mean and the first floor(size / 2) not, the scarcer side's all
    and the rest from the other when one is short."""
    mean = sum(rewards) / len(rewards)
    high = [i for i, r in enumerate(rewards) if r > mean]
    low = [i for i, r in enumerate(rewards) if r <= mean]
    h = min(len(high), max(size - size // 2, size - len(low)))
    return [rewards[i] for i in sorted(high[:h] + low[: size - h])]


def test_until_signal_regenerates_through_trl_and_trains_on_balanced_groups(tmp_path, monkeypatch):
    ds = tiny_dataset()
    trainer = dataflex_trainer(tmp_path, "reinforce_ada", dataset=ds, max_steps=3)
    observed = []
    decide = trainer.driver.strategy.decide
    trainer.driver.strategy.decide = lambda b, o=None: observed.append(o) or decide(b, o)
    rec = Recorder(trainer)
    trl_saw = record_trl_generations(monkeypatch, trainer)
    trainer.train()
    rounds = logged(trainer, R + "rounds")
    assert len(rounds) == len(rec.decisions) == 3 and sum(rounds) > 0, rounds
    assert len(trl_saw) == len(rounds) + sum(rounds)  # TRL generated every round itself
    i = 0
    for batch, pooled, out, r in zip(rec.batches, observed, rec.outs, rounds):
        gens = trl_saw[i : i + 1 + int(r)]
        i += 1 + int(r)
        S = batch.num_groups
        first = gens[0]["pids"][::G]
        assert [ds[int(batch.prompt_keys[g * G])]["pid"] for g in range(S)] == first
        # the pooled view holds every response TRL generated, one group per prompt
        assert pooled.num_groups == S and pooled.batch_size == sum(len(g["pids"]) for g in gens)
        rewards = batch.rewards.view(S, G)
        for g in range(S):
            pool = pooled.rewards[pooled.group_ids == g].tolist()
            pid = first[g]
            assert len(pool) == sum(gen["pids"].count(pid) for gen in gens)
            # a pool grows only while its responses all agree
            assert len(pool) == G or len(set(pool[:-G])) == 1
            assert rewards[g].tolist() == balanced(pool, G)
        # TRL's advantages recomputed over each assembled group (its own formula)
        adv = out["advantages"].view(S, G)
        mean = rewards.mean(1, keepdim=True)
        std = rewards.std(1, keepdim=True)
        torch.testing.assert_close(adv, (rewards - mean) / (std + 1e-4))
        assert int(out["num_items_in_batch"]) == int(batch.response_length.sum())
    assert len(logged(trainer, "loss")) == 3
    first_zero = logged(trainer, R + "zero_variance_first")
    pooled_zero = logged(trainer, R + "zero_variance_pooled")
    assert all(p <= f for p, f in zip(pooled_zero, first_zero))
    assert any(p < f for p, f in zip(pooled_zero, first_zero))
