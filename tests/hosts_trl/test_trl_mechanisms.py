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
from dataflex_rl.hosts.common.sampler import apportion  # noqa: E402
from tests.hosts_trl.tiny import (  # noqa: E402
    hashed_reward,  # noqa: E402
    tiny_dataset,
    tiny_model,
    tiny_tokenizer,
)
from tests.hosts_trl.trainers import (  # noqa: E402
    Recorder,
    dataflex_trainer,
    grpo_args,
    logged,
    record_trl_generations,
)

#: pre-rollout skip policies (no preset of their own): skip at once, from the first repeat
SKIPS = {
    "greso": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0},
    "thompson": {"name": "thompson", "low": 0.3, "high": 0.7},
}
#: per-prompt budgets: TRL refuses allocate up front, and until_signal's rounds are more
#: generations a step (both: tests/hosts_trl/test_trl_rollouts.py)
REFUSED = {n for n in PRESETS if "rollouts" in PRESETS[n].spec}
NAMES = sorted(set(PRESETS.names() if hasattr(PRESETS, "names") else PRESETS) - REFUSED)
NAMES += sorted(SKIPS)


def _parts(name):
    return set(Strategy(_spec(name), domains=("easy", "hard", "mid")).parts)


def _spec(name):
    """The preset; a mixer re-decides every step from the first (its preset waits 5).

    diffband weighs groups with solve rates in [0.2, 0.8] up, and its weights have mean 1 over
    the informative groups: with G = 4 all of them are inside (1/4, 2/4, 3/4) and every weight
    is 1, so the band is narrowed to [0.3, 0.7] (2/4 inside, 1/4 and 3/4 outside).
    """
    if name in SKIPS:
        return {"name": f"skip_{name}", "prerollout": {"actuator": SKIPS[name]}}
    if name in PRESETS and "mix" in Strategy(name, domains=("easy", "hard", "mid")).parts:
        return {"mix": {"preset": name, "warmup_steps": 0, "every": 1}}
    if name == "dapo":  # its selection here; its refill: tests/hosts_trl/test_trl_refill.py
        return {"name": "dapo_select", "select": {"preset": "dapo"}}
    if name == "dapo_entropy":  # likewise; with refill: tests/hosts_trl/test_trl_entropy.py
        return {"name": "dapo_entropy_select", "select": "dapo", "tokens": "high_entropy"}
    if name == "diffband":
        return {"reweight": {"preset": name, "actuator": {"low": 0.3, "high": 0.7}}}
    return name


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_acts_in_real_steps(tmp_path, monkeypatch, name):
    parts = _parts(name)
    steps = 3 if "mix" in parts or "prerollout" in parts else 2
    ds = tiny_dataset(per_domain=2 if "prerollout" in parts else 16)  # 6 prompts come back
    trainer = dataflex_trainer(tmp_path, _spec(name), dataset=ds, max_steps=steps)
    rec = Recorder(trainer)
    trl_saw = record_trl_generations(monkeypatch, trainer)
    trainer.train()
    assert len(rec.decisions) == steps and trainer.driver.decisions == steps
    assert len(trl_saw) == steps
    for saw, batch in zip(trl_saw, rec.batches):  # the strategy read TRL's own advantages
        assert torch.equal(saw["advantages"].float(), batch.response_advantages)
    if trainer.driver.intake is not None:  # TRL generated for the drawn rows, each G times in a row
        names = trainer.driver.intake.domains
        for saw, (rows, doms, _) in zip(trl_saw, rec.draws):
            assert saw["pids"] == [ds[r]["pid"] for r in rows for _ in range(4)]
            assert saw["domains"] == [names[d] for d in doms for _ in range(4)]
    assert len(logged(trainer, "dataflex/kept_response_fraction")) == steps
    assert len(logged(trainer, "dataflex/host_time_ms")) == steps
    for batch, decision, out in zip(rec.batches, rec.decisions, rec.outs):
        assert batch.batch_size == 16 and batch.group_ids.tolist() == [i // 4 for i in range(16)]
        base = batch.response_advantages
        lengths = batch.response_length
        kept_tokens = int(lengths[decision.keep_mask].sum())
        if decision.token_keep_mask is not None:  # token selection: advantages 0 on the
            # tokens not kept, TRL's masks and denominators as they were (renormalize false)
            # but for the rows a select dropped (its renormalize)
            T = out["advantages"].shape[1]
            keep = decision.token_keep_mask[:, :T]
            assert bool((out["advantages"][~keep] == 0).all())
            stay = decision.loss_rows
            assert bool(stay.all()) == ("select" not in parts)
            assert torch.equal(out["completion_mask"].sum(1), torch.where(stay, lengths, 0))
            assert int(out["num_items_in_batch"]) == int(lengths[stay].sum())
        elif "select" in parts:
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
        else:  # mix, pre-rollout and baseline leave TRL's loss alone
            assert torch.equal(out["advantages"], base)
            assert torch.equal(out["completion_mask"].sum(1), lengths)
    if name == "maxrl":  # TRL trains on MaxRL's (r - mean) / mean (0 without a success)
        for batch, out in zip(rec.batches, rec.outs):
            r = batch.rewards.double().view(4, 4)
            m = r.mean(1, keepdim=True)
            want = torch.where(m > 0, (r - m) / torch.where(m > 0, m, 1.0), 0.0).view(16)
            got = out["advantages"].reshape(16, -1)[:, 0].double()
            has = batch.response_length > 0
            assert torch.allclose(got[has], want[has], atol=1e-5), (got, want)
    fractions = logged(trainer, "dataflex/kept_response_fraction")
    if name == "high_entropy":  # a fifth of the tokens (ties may keep a few more)
        fractions = logged(trainer, "dataflex/kept_token_fraction")
        assert all(0.2 <= f < 0.4 for f in fractions), fractions
    elif name == "dapo_entropy":  # a fifth of the kept groups' tokens, fewer of the batch's
        fractions = logged(trainer, "dataflex/kept_token_fraction")
        assert all(0.0 < f < 0.4 for f in fractions), fractions
        assert any(not bool(d.loss_rows.all()) for d in rec.decisions)
    elif "select" in parts:
        assert min(fractions) < 1.0, f"{name} kept everything: {fractions}"
        if name in ("maxvar", "gfpo", "topk"):  # half of each group / of the batch
            assert all(d.keep_mask.float().mean() == 0.5 for d in rec.decisions)
    if "reweight" in parts:
        changed = [
            not torch.allclose(o["advantages"].reshape(16, -1)[:, 0], b.response_advantages)
            for o, b in zip(rec.outs, rec.batches)
        ]
        assert any(changed), f"{name} left every advantage as TRL computed it"
    if "prerollout" in parts:
        assert sum(logged(trainer, "dataflex/prerollout/candidates_skipped")) > 0, name
    if "mix" in parts:
        deficit = torch.zeros(3, dtype=torch.float64)  # carried over the draws
        for saw, (_rows, _doms, props) in zip(trl_saw, rec.draws):  # the proportions' quota
            generated = [trainer.driver.intake.domains.index(d) for d in saw["domains"][::4]]
            counts = torch.bincount(torch.tensor(generated), minlength=3)
            quota, deficit = apportion(props, 4, torch.full((3,), 4), deficit)
            assert torch.equal(counts, quota)
        assert logged(trainer, "dataflex/mix/domain/easy/target")
        if name != "static":
            assert max(logged(trainer, "dataflex/mix/updated")) == 1.0
            assert not torch.allclose(rec.draws[-1][2], rec.draws[0][2]), "proportions never moved"


def test_row_count_loss_scales_trl_advantages_by_weight_and_c(tmp_path, monkeypatch):
    """loss_type grpo divides by rows: after a drop, every kept row's advantage is TRL's
    advantage x its weight x c, c = N / R (R: kept rows with loss tokens)."""
    spec = {"select": {"preset": "difffilter"}, "reweight": {"preset": "softmax"}}
    trainer = dataflex_trainer(tmp_path, spec, loss_type="grpo", max_steps=2)
    rec = Recorder(trainer)
    trl_saw = record_trl_generations(monkeypatch, trainer)
    trainer.train()
    scales = logged(trainer, "dataflex/trl/advantage_scale")
    assert len(trl_saw) == len(rec.outs) == len(scales) == 2
    for saw, batch, decision, out, logged_c in zip(
        trl_saw, rec.batches, rec.decisions, rec.outs, scales
    ):
        stays = decision.keep_mask & (batch.response_length > 0)
        c = 16 / int(stays.sum())
        assert logged_c == pytest.approx(c)
        expect = saw["advantages"] * decision.weights_per_response * c
        expect = torch.where(decision.weights_per_response > 0, expect, torch.zeros_like(expect))
        assert torch.allclose(out["advantages"], expect, atol=1e-6)
        assert torch.equal(out["completion_mask"].any(1), stays)
    assert max(scales) > 1.0, f"difffilter dropped nothing: c = {scales}"


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
    assert trainer.driver.intake.domains == ("easy", "hard", "mid")
    for _, doms, _ in rec.draws:  # 4 prompts: 2 easy, 1 hard, 1 mid
        assert torch.bincount(torch.tensor(doms), minlength=3).tolist() == [2, 1, 1]
    assert logged(trainer, "dataflex/mix/domain/easy/actual") == [0.5, 0.5]


def test_recomputed_advantages_equal_trls_own_on_whole_kept_groups(tmp_path):
    """difffilter keeps whole groups, so advantages recomputed on the kept rows are the ones
    TRL computed for them: the same formula and TRL's constant (std + 1e-4). With verl's 1e-6
    they would differ by ~1e-4 relative, far over the tolerance."""
    spec = {"select": {"preset": "difffilter", "recompute_advantages": True}}
    trainer = dataflex_trainer(tmp_path, spec, max_steps=2)
    rec = Recorder(trainer)
    trainer.train()
    assert trainer.driver.strategy.adv_eps == 1e-4
    compared = 0
    for batch, decision in zip(rec.batches, rec.decisions):
        kept = decision.keep_mask
        trl = batch.response_advantages[kept]
        ours = decision.advantages_per_response[kept]
        torch.testing.assert_close(ours, trl, rtol=0.0, atol=1e-6)
        compared += int((trl.abs() > 0.1).sum())
    assert compared > 0  # some kept rows carry a real advantage
