"""The verl host's logic that needs no verl: config checks, batch adapter, write-back.

These run in any venv; the tests that drive real verl are in the other ``test_verl_*`` files.
"""

import math
from pathlib import Path

import pytest
import torch

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.verl.batch import build_batch, sessions_of, writeback
from dataflex_rl.hosts.verl.config import check, config_table, parse_host_config


def verl_view(estimator="grpo", loss_mode="vanilla", use_v1=True):
    return {
        "trainer": {"use_v1": use_v1},
        "algorithm": {"adv_estimator": estimator},
        "actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": loss_mode}}},
    }


# ---------------------------------------------------------------------- config
def test_unknown_key_names_it_and_suggests():
    with pytest.raises(
        ConfigError,
        match=r"dataflex\.stratgy: unknown key\. Did you mean "
        r"'strategy'\?",
    ):
        parse_host_config({"stratgy": "difffilter"})


def test_out_of_range_value_names_the_key():
    with pytest.raises(ConfigError, match=r"dataflex\.candidate_factor: must be >= 1"):
        parse_host_config({"candidate_factor": 0.5})


def test_native_is_an_unknown_key():
    with pytest.raises(ConfigError, match=r"^dataflex\.native: unknown key\. Valid keys: strategy"):
        parse_host_config({"strategy": "ar", "native": False})


def test_missing_block_runs_baseline(caplog):
    cfg = parse_host_config(None)
    assert cfg.strategy == "baseline"
    assert "without a 'dataflex' block" in caplog.text


def test_unknown_preset_is_the_engines_error():
    host = parse_host_config({"strategy": "difffiltr"})
    with pytest.raises(ConfigError, match="Did you mean 'difffilter'"):
        check(host, verl_view())


def test_group_scorer_rejected_for_non_group_estimator():
    host = parse_host_config({"strategy": "difffilter"})
    with pytest.raises(ConfigError, match="needs prompt groups.*'gae'"):
        check(host, verl_view(estimator="gae"))


def test_bypass_mode_rejected_for_select_and_reweight_only():
    for preset in ("difffilter", "softmax"):
        host = parse_host_config({"strategy": preset})
        with pytest.raises(ConfigError, match="bypass_mode' ignores rollout_is_weights"):
            check(host, verl_view(loss_mode="bypass_mode"))
    # mixing acts before generation: any loss is fine
    host = parse_host_config({"strategy": "reward_gap"})
    check(host, verl_view(loss_mode="bypass_mode"))


def test_entropy_strategies_fit_verl_except_where_it_computes_none():
    host = parse_host_config({"strategy": "high_entropy"})
    check(host, verl_view())  # verl's actor writes entropies with the old log-probs
    view = verl_view()
    view["algorithm"]["rollout_correction"] = {"bypass_mode": True}
    with pytest.raises(ConfigError, match=r"rollout_correction\.bypass_mode: .* entropies"):
        check(host, view)
    check(parse_host_config({"strategy": "difffilter"}), view)  # reads no entropies
    micro = {"tokens": {"preset": "high_entropy", "actuator": {"scope": "micro_batch"}}}
    with pytest.raises(ConfigError, match=r"TopTokens \(scope: micro_batch\) needs micro_batch"):
        check(parse_host_config({"strategy": micro}), verl_view())


def test_token_selection_writes_weights_zero_off_the_kept_tokens():
    # tokens 1 2 | 3 4 | 5 6, top half: 4, 5, 6 kept; verl's actor gets weight 1 there, 0
    # elsewhere; the masks stay (renormalize false)
    ent = torch.tensor([[1.0, 2], [3, 4], [5, 6]])
    mask = torch.ones(3, 2, dtype=torch.int64)
    keys = [f"u{i}_0_0" for i in range(3)]
    rb, sessions = build_batch(
        keys=keys,
        uids=["u0", "u0", "u1"],
        is_padding=[False] * 3,
        rm_scores=torch.tensor([[0.0, 1], [0, 0], [0, 1]]),
        response_mask=mask,
        advantages=torch.tensor([[1.0, 1], [-1, -1], [0, 0]]),
        old_log_probs=None,
        entropies=ent,
        step=0,
    )
    spec = {"tokens": {"preset": "high_entropy", "actuator": {"fraction": 0.5}}}
    d = Strategy(spec).decide(rb)
    wb = writeback(
        d,
        rb,
        sessions,
        response_mask=mask,
        loss_mask=mask,
        advantages=torch.zeros(3, 2),
        existing_weights=None,
    )
    assert wb.rollout_is_weights.tolist() == [[0, 0], [0, 1], [1, 1]]
    assert wb.response_mask is None and wb.loss_mask is None


DAPO_HALF_ENTROPY = {
    "select": "dapo",
    "tokens": {"preset": "high_entropy", "actuator": {"fraction": 0.5}},
}


def _dapo_entropy_writeback(keys, uids):
    """Groups u0 (rewards 1, 0), u1 (1, 1: zero variance) and u2 (0, 1), one row per session
    output, entropies [1, 2] [3, 4] | [9, 9] [9, 9] | [5, 6] [.5, .5] on the final outputs."""
    B = len(keys)
    ent = torch.tensor([[1.0, 2], [3, 4], [9, 9], [9, 9], [5, 6], [0.5, 0.5]])
    reward = torch.tensor([1.0, 0, 1, 1, 0, 1])
    final = sessions_of(keys).final_rows
    full_ent = torch.zeros(B, 2)
    full_ent[final] = ent
    rm = torch.zeros(B, 2)
    rm[final, 1] = reward
    mask = torch.ones(B, 2, dtype=torch.int64)
    rb, sessions = build_batch(
        keys=keys,
        uids=uids,
        is_padding=[False] * B,
        rm_scores=rm,
        response_mask=mask,
        advantages=torch.ones(B, 2),
        old_log_probs=None,
        entropies=full_ent,
        step=0,
    )
    d = Strategy(DAPO_HALF_ENTROPY).decide(rb)
    wb = writeback(
        d,
        rb,
        sessions,
        response_mask=mask,
        loss_mask=mask,
        advantages=torch.ones(B, 2),
        existing_weights=None,
    )
    return d, wb


def test_group_and_token_selection_write_the_kept_groups_tokens_and_denominator():
    # dapo drops u1 (rows 2, 3). The token pool is rows 0, 1, 4, 5: 1 2 3 4 5 6 .5 .5, the
    # median 2.5: tokens 3 4 (row 1) and 5 6 (row 4) kept; u1's 9s are not in the pool.
    # band renormalizes, top_tokens does not: the masks drop u1's rows only, so rows 0 and 5
    # (no kept token) stay in verl's token-mean denominator with weight 0
    keys = [f"u{g}_{i}_0" for g in range(3) for i in range(2)]
    d, wb = _dapo_entropy_writeback(keys, [f"u{g}" for g in range(3) for _ in range(2)])
    assert d.keep_mask.tolist() == [False, True, False, False, True, False]
    assert wb.rollout_is_weights.tolist() == [[0, 0], [1, 1], [0, 0], [0, 0], [1, 1], [0, 0]]
    assert wb.response_mask.sum(1).tolist() == [2, 2, 0, 0, 2, 2]
    assert torch.equal(wb.loss_mask, wb.response_mask)


def test_group_and_token_selection_carry_to_earlier_session_outputs():
    # as above with u0's first session in two outputs (rows 0, 1; row 1 final): row 0
    # follows its final output, which keeps no token but stays in the denominator
    keys = ["u0_0_0", "u0_0_1", "u0_1_0", "u1_0_0", "u1_1_0", "u2_0_0", "u2_1_0"]
    uids = ["u0", "u0", "u0", "u1", "u1", "u2", "u2"]
    d, wb = _dapo_entropy_writeback(keys, uids)
    assert wb.rollout_is_weights.sum(1).tolist() == [0, 0, 2, 0, 0, 2, 0]
    assert wb.response_mask.sum(1).tolist() == [2, 2, 2, 0, 0, 2, 2]


def test_recompute_advantages_needs_grpo():
    host = parse_host_config({"strategy": "maxvar"})  # recomputes by default (PODS)
    with pytest.raises(ConfigError, match="recompute_advantages.*'rloo'"):
        check(host, verl_view(estimator="rloo"))
    check(host, verl_view(estimator="grpo"))
    off = parse_host_config(
        {"strategy": {"select": {"preset": "maxvar", "recompute_advantages": False}}}
    )
    check(off, verl_view(estimator="rloo"))


def test_static_proportions_only_for_prerollout_without_mix():
    for spec in ("reward_gap", "difffilter"):
        host = parse_host_config({"strategy": spec, "proportions": [1, 1, 1]})
        with pytest.raises(ConfigError, match="dataflex.proportions: only used"):
            check(host, verl_view())
    host = parse_host_config(
        {"strategy": {"prerollout": {"actuator": "greso"}}, "proportions": {"math": 2, "logic": 1}}
    )
    check(host, verl_view())


def test_v0_trainer_rejected():
    with pytest.raises(ConfigError, match="trainer.use_v1"):
        check(parse_host_config({}), verl_view(use_v1=False))


def test_docs_list_the_block_as_declared():
    page = (Path(__file__).resolve().parents[2] / "docs" / "hosts" / "verl.md").read_text()
    assert config_table() in page, "docs/hosts/verl.md: paste config_table() into the table"


# ---------------------------------------------------------------------- batch and write-back
def _trajectories(rewards, lengths, uids, keys=None, padding=None, adv=None):
    B = len(rewards)
    T = max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    rm = torch.zeros(B, T)
    for i, (r, n) in enumerate(zip(rewards, lengths)):
        if n:
            rm[i, n - 1] = r
    keys = keys or [f"{u}_{i}_0" for i, u in enumerate(uids)]
    adv = torch.tensor(adv if adv is not None else [0.0] * B)[:, None] * mask
    return dict(
        keys=keys,
        uids=uids,
        is_padding=padding or [False] * B,
        rm_scores=rm,
        response_mask=mask,
        advantages=adv,
        old_log_probs=None,
        step=0,
    )


def test_outcome_estimators_pass_each_rows_advantage_exactly():
    # verl's outcome advantages: one float32 value per row times the mask. 0.1 over 3 tokens
    # does not divide back exactly from a float32 row sum; the first valid token is the value.
    # Row 2's first token was rejected by rollout correction (a hole at column 0); row 4 is
    # padding with an all-zero mask.
    t = _trajectories(
        [1, 0, 1, 0, 0],
        [3, 5, 7, 2, 1],
        ["u0", "u0", "u0", "u1", "pad"],
        padding=[False] * 4 + [True],
        adv=[0.1, -0.3, 0.7, 1e-3, 0.0],
    )
    t["response_mask"][2, 0] = 0
    t["response_mask"][4] = 0
    exact = torch.tensor([0.1, -0.3, 0.7, 1e-3, 0.0])  # float32, as verl computes them
    per, _ = build_batch(**t, per_response_advantages=True)
    assert torch.equal(per.response_advantages, exact)
    assert per.response_lengths.tolist() == [3, 5, 6, 2, 0]
    assert torch.equal(per.advantage_per_response, exact)
    tok, _ = build_batch(**t)  # token path: a mean over the row, equal up to float rounding
    assert tok.response_advantages is None and tok.response_lengths is None
    torch.testing.assert_close(tok.advantage_per_response, exact, rtol=2e-7, atol=0)
    for preset in ("softmax", "topk", "difffilter"):
        a, b = Strategy(preset).decide(per), Strategy(preset).decide(tok)
        assert torch.equal(a.keep_mask, b.keep_mask), preset
        assert torch.equal(a.weights_per_response, b.weights_per_response), preset


def test_multi_output_sessions_pass_their_final_outputs_advantage():
    keys = ["u0_0_0", "u0_0_1", "u0_1_0", "u1_0_0", "u1_1_0"]
    t = _trajectories(
        [0, 1, 0, 1, 1],
        [2, 3, 2, 2, 2],
        ["u0"] * 3 + ["u1"] * 2,
        keys=keys,
        adv=[0.5, 0.7, -0.7, 0, 0],
    )
    batch, _ = build_batch(**t, per_response_advantages=True)
    assert batch.response_advantages.tolist() == torch.tensor([0.7, -0.7, 0.0, 0.0]).tolist()
    assert batch.response_lengths.tolist() == [3, 2, 2, 2]


def test_difffilter_weights_masks_and_composition():
    # two groups of 4: u0 all correct (solve rate 1, outside (0.2, 0.8)), u1 half correct
    t = _trajectories(
        [1, 1, 1, 1, 1, 0, 1, 0],
        [2, 3, 2, 3, 2, 3, 2, 3],
        ["u0"] * 4 + ["u1"] * 4,
        adv=[0, 0, 0, 0, 0.87, -0.87, 0.87, -0.87],
    )
    batch, sessions = build_batch(**t)
    decision = Strategy("difffilter").decide(batch)
    existing = torch.full_like(t["rm_scores"], 0.5)  # verl's rollout-correction weights
    wb = writeback(
        decision,
        batch,
        sessions,
        response_mask=t["response_mask"],
        loss_mask=t["response_mask"].clone(),
        advantages=t["advantages"],
        existing_weights=existing,
    )
    w = wb.rollout_is_weights
    assert w[:4].abs().sum() == 0  # dropped group: weight 0
    assert torch.equal(w[4:], 0.5 * t["response_mask"][4:].float())  # kept: 1 x 0.5
    # renormalize (difffilter's default): dropped rows leave the token-mean denominator too
    assert wb.response_mask[:4].sum() == 0 and wb.loss_mask[:4].sum() == 0
    assert torch.equal(wb.response_mask[4:], t["response_mask"][4:])
    assert wb.advantages is None


def test_multi_output_sessions_follow_their_final_output():
    # session u0_0 has outputs 0 and 1 (final); the group u0 has sessions 0 and 1
    keys = ["u0_0_0", "u0_0_1", "u0_1_0", "u1_0_0", "u1_1_0"]
    t = _trajectories(
        [0, 1, 0, 1, 1],
        [2, 2, 2, 2, 2],
        ["u0", "u0", "u0", "u1", "u1"],
        keys=keys,
        adv=[0.7, 0.7, -0.7, 0, 0],
    )
    s = sessions_of(keys)
    assert s.final_rows.tolist() == [1, 2, 3, 4] and s.session_of_row.tolist() == [0, 0, 1, 2, 3]
    batch, sessions = build_batch(**t)
    assert batch.batch_size == 4 and batch.rewards.tolist() == [1, 0, 1, 1]
    decision = Strategy("difffilter").decide(batch)  # u0: 1 of 2 solved -> kept; u1 dropped
    wb = writeback(
        decision,
        batch,
        sessions,
        response_mask=t["response_mask"],
        loss_mask=t["response_mask"],
        advantages=t["advantages"],
        existing_weights=None,
    )
    assert wb.rollout_is_weights.sum(1).tolist() == [2, 2, 2, 0, 0]


def test_invalid_and_padding_rows_get_nothing():
    t = _trajectories(
        [1, float("nan"), 1, 0, 0],
        [2, 2, 2, 2, 1],
        ["u0", "u0", "u1", "u1", "pad"],
        padding=[False] * 4 + [True],
        adv=[0.7, -0.7, 0.7, -0.7, 0],
    )
    t["response_mask"][4] = 0  # verl's padding rows have all-zero masks
    batch, sessions = build_batch(**t)
    decision = Strategy("softmax").decide(batch)
    wb = writeback(
        decision,
        batch,
        sessions,
        response_mask=t["response_mask"],
        loss_mask=t["response_mask"],
        advantages=t["advantages"],
        existing_weights=None,
    )
    w = wb.rollout_is_weights.sum(1)
    assert w[1] == 0 and w[4] == 0 and bool((w[[0, 2, 3]] > 0).all())
    # the NaN row is removed like padding: masks and advantage 0, so the loss stays finite
    assert wb.response_mask[1].sum() == 0 and wb.loss_mask[1].sum() == 0
    assert wb.advantages[1].abs().sum() == 0 and torch.isfinite(wb.advantages).all()
    assert wb.returns is None  # only recomputed GRPO advantages touch returns
    assert decision.metrics["dataflex/invalid_reward_responses"] == 1
    assert decision.metrics["dataflex/padding_responses"] == 1


def test_recomputed_advantages_are_written_with_returns():
    # one group of 4, rewards 1, 1, 0, 0; maxvar keeps 2 (one 1 and one 0): A = +-0.7071
    t = _trajectories([1, 1, 0, 0], [2, 2, 2, 2], ["u"] * 4, adv=[0.87, 0.87, -0.87, -0.87])
    batch, sessions = build_batch(**t)
    decision = Strategy("maxvar").decide(batch)
    wb = writeback(
        decision,
        batch,
        sessions,
        response_mask=t["response_mask"],
        loss_mask=t["response_mask"],
        advantages=t["advantages"],
        existing_weights=None,
    )
    kept = decision.keep_mask
    assert int(kept.sum()) == 2
    a = wb.advantages[:, 0]
    # kept pair (1, 0): mean 0.5, unbiased std 0.7071 -> A = +-0.5 / 0.7071 = +-0.7071
    assert sorted(a[kept].tolist()) == pytest.approx(
        [-0.5 / math.sqrt(0.5), 0.5 / math.sqrt(0.5)], abs=1e-4
    )
    assert a[~kept].abs().sum() == 0
    assert torch.equal(wb.fields()["returns"], wb.advantages)


def test_everything_dropped_keeps_masks_so_the_loss_is_zero_not_nan():
    t = _trajectories([1, 1, 0, 0], [2, 3, 2, 3], ["u0", "u0", "u1", "u1"])
    batch, sessions = build_batch(**t)
    with pytest.warns(UserWarning, match="dropped every response"):
        decision = Strategy("difffilter").decide(batch)  # solve rates 1 and 0: all dropped
    wb = writeback(
        decision,
        batch,
        sessions,
        response_mask=t["response_mask"],
        loss_mask=t["response_mask"],
        advantages=t["advantages"],
        existing_weights=None,
    )
    assert wb.rollout_is_weights.abs().sum() == 0
    assert wb.response_mask is None and wb.loss_mask is None
