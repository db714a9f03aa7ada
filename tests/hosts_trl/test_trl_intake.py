"""Intake at generation time in real TRL: exactly N / G prompts, each G times in a row, the
quotas of the strategy's proportions, pre-rollout skipping before generation (TRL generates
only for the drawn prompts), and clear errors for data the intake cannot index."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from tests.hosts_trl.tiny import hashed_reward, tiny_dataset  # noqa: E402
from tests.hosts_trl.trainers import Recorder, dataflex_trainer, logged  # noqa: E402

GRESO = {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}


def scoring(seen: list):
    """``hashed_reward`` that also records the prompts of every call (one call per generation)."""

    def reward(prompts, completions, domain, **kw):
        seen.append(list(prompts))
        return hashed_reward(prompts, completions, domain, **kw)

    reward.__name__ = "hashed_reward"
    return reward


def test_exact_count_contiguous_copies_and_quotas(tmp_path):
    seen: list = []
    spec = {"mix": {"actuator": {"name": "static", "floor": 0.0}, "prior": [0.25, 0.25, 0.5]}}
    ds = tiny_dataset()
    trainer = dataflex_trainer(tmp_path, spec, reward=scoring(seen), dataset=ds, max_steps=3)
    rec = Recorder(trainer)
    trainer.train()
    assert len(seen) == len(rec.draws) == 3
    for prompts, (rows, doms, _) in zip(seen, rec.draws):
        # 16 completions: the 4 drawn prompts, each 4 times in a row, in the drawn order
        assert prompts == [ds[r]["prompt"] for r in rows for _ in range(4)]
        assert [ds[r]["domain"] for r in rows] == [("easy", "hard", "mid")[d] for d in doms]
        assert torch.bincount(torch.tensor(doms), minlength=3).tolist() == [1, 1, 2]
    for batch, (rows, doms, _) in zip(rec.batches, rec.draws):
        assert batch.prompt_keys == tuple(r for r in rows for _ in range(4))
        assert batch.domain_ids.tolist() == [d for d in doms for _ in range(4)]


def test_prerollout_skips_before_generation(tmp_path):
    seen: list = []
    ds = tiny_dataset(per_domain=3)  # 9 prompts: they come back, and solved ones are skipped
    trainer = dataflex_trainer(tmp_path, GRESO, reward=scoring(seen), dataset=ds, max_steps=4)
    rec = Recorder(trainer)
    trainer.train()
    skipped = logged(trainer, "dataflex/prerollout/candidates_skipped")
    assert len(skipped) == 4 and sum(skipped) > 0
    for prompts, (rows, _, _) in zip(seen, rec.draws):  # TRL generated for the drawn only
        assert prompts == [ds[r]["prompt"] for r in rows for _ in range(4)]
    # explore_prob 0, streak 1: a prompt whose last group was all-correct or all-wrong is
    # never generated again (unless the rounds run out: ``forced``)
    forced = logged(trainer, "dataflex/prerollout/forced")
    assert forced.count(0.0) >= 2
    last: dict = {}
    for k, (batch, (rows, _, _)) in enumerate(zip(rec.batches, rec.draws)):
        if forced[k] == 0:
            assert not [r for r in rows if last.get(r) in (0.0, 1.0)]
        means = batch.rewards.view(-1, 4).mean(1).tolist()
        last.update(zip(rows, means))
    assert logged(trainer, "dataflex/prerollout/tokens_saved_est")


def test_iterable_dataset_is_refused_for_a_mixing_strategy(tmp_path):
    with pytest.raises(
        ValueError, match="train_dataset: a strategy that mixes.*map-style.*IterableDataset"
    ):
        dataflex_trainer(tmp_path, "static", dataset=tiny_dataset().to_iterable_dataset())


def test_iterable_dataset_trains_with_a_select_strategy(tmp_path):
    """No intake: TRL's own dataloader order, and select acts as usual."""
    ds = tiny_dataset().to_iterable_dataset()
    trainer = dataflex_trainer(tmp_path, "maxvar", dataset=ds, max_steps=1)
    assert trainer.driver.intake is None
    trainer.train()
    assert logged(trainer, "dataflex/kept_response_fraction") == [0.5]


def test_missing_domain_column_lists_the_columns(tmp_path):
    ds = tiny_dataset().rename_column("domain", "topic")
    with pytest.raises(
        ConfigError,
        match=r"neither 'domain' nor 'data_source' \(columns: "
        r"'prompt', 'topic', 'pid'\)",
    ):
        dataflex_trainer(tmp_path, "static", dataset=ds)


def test_domain_key_and_domain_order(tmp_path):
    ds = tiny_dataset().rename_column("domain", "topic")
    block = {"strategy": "static", "domain_key": "topic", "domains": ["hard", "mid", "easy"]}

    def reward(prompts, completions, topic, **kw):
        return hashed_reward(prompts, completions, topic)

    trainer = dataflex_trainer(tmp_path, block, dataset=ds, reward=reward, max_steps=1)
    assert trainer.driver.intake.domains == ("hard", "mid", "easy")
    trainer.train()
    assert logged(trainer, "dataflex/mix/domain/hard/target") == [pytest.approx(1 / 3)]


def test_probe_reads_the_trl_policys_prompt_representation(tmp_path):
    # the probe skips first visits once it has seen 4 outcomes (threshold 0.05: nearly every
    # candidate); TRL computes the representation (layer 1 of the tiny model) and generates
    # only for the drawn prompts; an exact batch audits nothing (so a fixed threshold,
    # max_false_skip null: the false-skip control, with no audited outcome, skips nothing)
    probe = {
        "prerollout": {
            "actuator": {
                "name": "probe",
                "layer": 1,
                "min_observed": 4,
                "threshold": 0.05,
                "max_false_skip": None,
            }
        }
    }
    seen: list = []
    ds = tiny_dataset()
    trainer = dataflex_trainer(tmp_path, probe, reward=scoring(seen), dataset=ds, max_steps=3)
    rec = Recorder(trainer)
    trainer.train()
    assert logged(trainer, "dataflex/prerollout/probe_ready") == [0.0, 1.0, 1.0]
    assert sum(logged(trainer, "dataflex/prerollout/skipped_probe")[1:]) > 0
    assert min(logged(trainer, "dataflex/prerollout/probe_tokens")) > 0
    assert not logged(trainer, "dataflex/prerollout/audited")
    for prompts, (rows, _, _) in zip(seen, rec.draws):
        assert prompts == [ds[r]["prompt"] for r in rows for _ in range(4)]
    probe_state = trainer.driver.strategy.parts["prerollout"][1]
    assert probe_state._observed == 12  # 3 steps x 4 prompts, all learned from


def test_curriculum_draws_toward_its_target_at_the_mixs_counts(tmp_path):
    # target 0 at width .1: after a prompt's first group, the ones that failed are drawn
    # before the others; the per-domain counts are the plain draw's (the training set's own
    # shares), only which prompts of a domain differs
    from dataflex_rl.hosts.common.sampler import DomainSampler

    seen: list = []
    ds = tiny_dataset(per_domain=3)
    spec = {"curriculum": {"actuator": {"name": "target_difficulty", "target": 0.0, "width": 0.1}}}
    trainer = dataflex_trainer(tmp_path, spec, reward=scoring(seen), dataset=ds, max_steps=4)
    assert trainer.driver.intake is not None
    rec = Recorder(trainer)
    trainer.train()
    plain = DomainSampler([3, 3, 3], ("easy", "hard", "mid"))
    for prompts, (rows, doms, _) in zip(seen, rec.draws):  # TRL generated the drawn only
        assert prompts == [ds[r]["prompt"] for r in rows for _ in range(4)]
        counts = torch.bincount(torch.tensor(doms), minlength=3).tolist()
        assert counts == plain.quota(torch.ones(3, dtype=torch.float64) / 3, 4).tolist()
        assert len(set(rows)) == len(rows)
    assert logged(trainer, "dataflex/curriculum/target") == [0.0] * 4
    drawn = logged(trainer, "dataflex/curriculum/drawn_pass_rate")
    pool = logged(trainer, "dataflex/curriculum/pool_pass_rate")
    assert drawn[0] == pool[0] == 0.5  # nothing seen yet: every prompt at the prior
    assert all(d < p for d, p in zip(drawn[1:], pool[1:]))
    # the history the curriculum read is the batches' outcomes, keyed by row
    history = trainer.driver.strategy.history
    for batch, (rows, _, _) in zip(rec.batches, rec.draws):
        assert set(batch.prompt_keys) == set(rows)
    assert len(history) == len({r for rows, _, _ in rec.draws for r in rows})
