"""Every registered preset acting in real TRL 1.16 ``GRPOTrainer`` steps on CPU (tiny model).

Per generation batch the test reads what the strategy decided and what TRL's loss then reads:
select zeroes dropped rows' advantages and loss mask (and ``num_items_in_batch`` counts only
kept tokens), reweight scales TRL's advantages by the weights, a mixer's drawn domain counts are
the largest-remainder quotas of the proportions in force, and the ``dataflex/...`` metrics land
in ``trainer.state.log_history``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.core.preset import PRESETS  # noqa: E402
from dataflex_rl.core.strategy import Strategy  # noqa: E402
from dataflex_rl.hosts.common.sampler import largest_remainder  # noqa: E402
from tests.hosts_trl.tiny import (  # noqa: E402
    hashed_reward,  # noqa: E402
    tiny_dataset,
    tiny_model,
    tiny_tokenizer,
)
from tests.hosts_trl.trainers import Recorder, dataflex_trainer, grpo_args, logged  # noqa: E402

NAMES = sorted(PRESETS.names() if hasattr(PRESETS, "names") else PRESETS)


def _parts(name):
    return set(Strategy(name, domains=("easy", "hard", "mid")).parts)


def _spec(name):
    """The preset; a mixer re-decides every step from the first (its preset waits 5).

    diffband weighs groups with solve rates in [0.2, 0.8] up, and its weights have mean 1 over
    the informative groups: with G = 4 all of them are inside (1/4, 2/4, 3/4) and every weight
    is 1, so the band is narrowed to [0.3, 0.7] (2/4 inside, 1/4 and 3/4 outside).
    """
    if "mix" in _parts(name):
        return {"mix": {"preset": name, "warmup_steps": 0, "every": 1}}
    if name == "diffband":
        return {"reweight": {"preset": name, "actuator": {"low": 0.3, "high": 0.7}}}
    return name


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_acts_in_real_steps(tmp_path, name):
    parts = _parts(name)
    steps = 3 if "mix" in parts else 2
    trainer = dataflex_trainer(tmp_path, _spec(name), max_steps=steps)
    rec = Recorder(trainer)
    trainer.train()
    assert len(rec.decisions) == steps and trainer._dataflex_step == steps
    assert len(logged(trainer, "dataflex/kept_response_fraction")) == steps
    assert len(logged(trainer, "dataflex/host_time_ms")) == steps
    for batch, decision, out in zip(rec.batches, rec.decisions, rec.outs):
        assert batch.batch_size == 16 and batch.group_ids.tolist() == [i // 4 for i in range(16)]
        base = batch.response_advantages
        lengths = batch.response_length
        kept_tokens = int(lengths[decision.keep_mask].sum())
        if "select" in parts:
            drop = ~decision.keep_mask
            assert out["advantages"][drop].abs().sum() == 0
            assert out["completion_mask"][drop].sum() == 0  # renormalize: out of the loss
            kept = decision.keep_mask
            assert torch.equal(out["completion_mask"][kept].sum(1), lengths[kept])
            assert int(out["num_items_in_batch"]) == kept_tokens
        elif "reweight" in parts:
            w = decision.weights_per_token if name == "ar" else decision.weights_per_response
            expect = (
                base[:, None] * w[:, : out["advantages"].shape[-1]] if w.dim() == 2 else base * w
            )
            assert torch.allclose(out["advantages"], expect, atol=1e-6)
        else:  # mix and baseline leave TRL's loss alone
            assert torch.equal(out["advantages"], base)
            assert torch.equal(out["completion_mask"].sum(1), lengths)
    fractions = logged(trainer, "dataflex/kept_response_fraction")
    if "select" in parts:
        assert min(fractions) < 1.0, f"{name} kept everything: {fractions}"
        if name in ("maxvar", "gfpo", "topk"):  # half of each group / of the batch
            assert all(d.keep_mask.float().mean() == 0.5 for d in rec.decisions)
    if "reweight" in parts:
        changed = [
            not torch.allclose(o["advantages"].reshape(16, -1)[:, 0], b.response_advantages)
            for o, b in zip(rec.outs, rec.batches)
        ]
        assert any(changed), f"{name} left every advantage as TRL computed it"
    if "mix" in parts:
        for _rows, doms, props in rec.draws:  # the quota of the proportions in force
            counts = torch.bincount(torch.tensor(doms), minlength=3)
            quota = largest_remainder(props, 4, torch.full((3,), 4))
            assert torch.equal(counts, quota)
        assert logged(trainer, "dataflex/mix/domain/easy/target")
        if name != "static":
            assert max(logged(trainer, "dataflex/mix/updated")) == 1.0
            assert not torch.allclose(rec.draws[-1][2], rec.draws[0][2]), "proportions never moved"


def test_baseline_trains_exactly_like_stock_trl(tmp_path):
    """No mechanism, no intake: the same rows, completions, loss and weights as GRPOTrainer."""
    from trl import GRPOTrainer

    tok = tiny_tokenizer()
    stock = GRPOTrainer(
        model=tiny_model(tok),
        reward_funcs=hashed_reward,
        args=grpo_args(tmp_path / "stock"),
        train_dataset=tiny_dataset(),
        processing_class=tok,
    )
    stock.train()
    ours = dataflex_trainer(tmp_path / "ours", "baseline")
    ours.train()
    assert logged(ours, "loss") == logged(stock, "loss")
    for (name, a), b in zip(stock.model.named_parameters(), ours.model.parameters()):
        assert torch.equal(a, b), name


def test_static_prior_sets_the_drawn_domain_counts(tmp_path):
    spec = {"mix": {"actuator": {"name": "static", "floor": 0.0}, "prior": [0.5, 0.25, 0.25]}}
    trainer = dataflex_trainer(tmp_path, spec, max_steps=2)
    rec = Recorder(trainer)
    trainer.train()
    assert trainer.intake.domains == ("easy", "hard", "mid")
    for _, doms, _ in rec.draws:  # 4 prompts: 2 easy, 1 hard, 1 mid
        assert torch.bincount(torch.tensor(doms), minlength=3).tolist() == [2, 1, 1]
    assert logged(trainer, "dataflex/mix/domain/easy/actual") == [0.5, 0.5]
