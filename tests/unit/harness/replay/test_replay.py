"""Replay: rebuilt batches, exactness on logs of every preset, figures, notes and the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dataflex_rl import Strategy
from dataflex_rl.core.batch import group_successes, informative_mask
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.replay.replay import (
    _seg_corr,
    _seg_jaccard,
    read_log,
    replay,
    strategies_with_overrides,
)
from dataflex_rl.hosts.common.decision_log import DecisionLog
from dataflex_rl.presets import PRESETS
from tests.decision_logs import DOMAINS, make_batch, write_log

MIX = {n for n, p in PRESETS.items() if "mix" in p.spec}


def test_rebuilt_batch_gives_the_same_per_response_signals(tmp_path):
    write_log(tmp_path, "baseline", 3)
    log = read_log(tmp_path)
    for i in range(3):
        orig, back = make_batch(i), log.batch(i)
        assert back.step == orig.step and back.domains == orig.domains
        assert back.prompt_keys == orig.prompt_keys
        for name in (
            "rewards",
            "group_ids",
            "domain_ids",
            "response_length",
            "is_padding",
            "active_mask",
        ):
            assert torch.equal(getattr(back, name), getattr(orig, name)), name
        assert torch.equal(informative_mask(back), informative_mask(orig))
        assert torch.equal(back.advantages, orig.advantages)  # constant rows: exact
        assert torch.equal(back.advantage_per_response, orig.advantage_per_response)


def test_per_response_advantages_are_rebuilt_as_the_host_passed_them(tmp_path):
    write_log(tmp_path / "per", "baseline", 2, per_response=True)
    write_log(tmp_path / "tok", "baseline", 2)
    per, tok = read_log(tmp_path / "per"), read_log(tmp_path / "tok")
    for i in range(2):
        orig, back = make_batch(i, per_response=True), per.batch(i)
        assert torch.equal(back.response_advantages, orig.response_advantages)
        assert torch.equal(back.response_lengths, orig.response_lengths)
        assert torch.equal(back.advantages, orig.advantages)
        plain = tok.batch(i)  # a host without them: none rebuilt (its decisions read tokens)
        assert plain.response_advantages is None and plain.response_lengths is None


def test_a_host_with_only_per_response_advantages_replays_with_full_tokens(tmp_path):
    # a host like TRL passes response_advantages and no token advantages: the token columns
    # hold NaN, the per-response values are still rebuilt and decisions replay exactly
    st = Strategy("topk", domains=DOMAINS)
    log = DecisionLog(
        tmp_path, domains=DOMAINS, strategy_spec=st.spec.to_dict(), host="test", full_tokens=True
    )
    batches = [make_batch(i, per_response=True).replace(advantages=None) for i in range(3)]
    for b in batches:
        log.record(b, st.decide(b))
    log.close()
    back = read_log(tmp_path)
    for i, b in enumerate(batches):
        assert torch.equal(back.batch(i).response_advantages, b.response_advantages)
    assert replay(back, ["topk"]).overall["topk"]["exact_steps"] == 3


def test_a_log_without_the_step_column_rebuilds_token_advantages(tmp_path):
    # logs written before the per_response_advantages column: token advantages, as then
    write_log(tmp_path, "baseline", 2, per_response=True)
    log = read_log(tmp_path)
    del log.steps["per_response_advantages"]
    assert log.batch(0).response_advantages is None and log.batch(0).advantages is not None


@pytest.mark.parametrize("name", ["topk", "softmax", "per", "maxvar", "dump_ucb"])
def test_replay_is_exact_on_logs_of_hosts_passing_per_response_advantages(tmp_path, name):
    steps = 11 if name in MIX else 4
    write_log(tmp_path, name, steps, per_response=True)
    res = replay(read_log(tmp_path), [name])
    assert res.overall[name]["exact_steps"] == steps


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_replaying_the_logged_preset_reproduces_every_decision(tmp_path, name):
    steps = 11 if name in MIX else 4  # mixers: warm-up 5, every 5 -> two updates
    # token weights and token choices need the tokens
    full = name in ("ar", "high_entropy", "dapo_entropy")
    write_log(tmp_path, name, steps, full_tokens=full)
    res = replay(read_log(tmp_path), [name])
    assert res.overall[name]["exact_steps"] == steps
    # a refilling preset's decisions replay exactly; the refill itself is what replay says
    # it cannot redo, and so are a curriculum's draws and per-prompt budgets
    cannot = [m for m in ("refill", "curriculum", "rollouts") if m in PRESETS[name].spec]
    assert [n.split(":")[0] for n in res.notes[name]] == cannot
    if name in MIX:
        assert sum(r["mix_updated"] for r in res.rows) >= 2


def test_ar_without_tokens_keeps_exactly_and_says_which_flag_logs_the_tokens(tmp_path):
    write_log(tmp_path / "plain", "ar", 3)
    res = replay(read_log(tmp_path / "plain"), ["ar"])
    assert all(r["jaccard_logged"] == 1.0 for r in res.rows)  # kept set exact
    assert res.overall["ar"]["exact_steps"] == 0  # weights approximate
    assert "token_prob_mean" in res.notes["ar"][0] and "full_tokens" in res.notes["ar"][0]
    # with each response's mean token probability the per-response weights replay to rounding
    write_log(tmp_path / "mean", "ar", 3, token_prob_mean=True)
    log = read_log(tmp_path / "mean")
    res = replay(log, ["ar"])
    assert all(r["weight_max_diff_logged"] < 1e-5 for r in res.rows)
    assert "full_tokens: true" in res.notes["ar"][0]


def test_state_carries_across_steps(tmp_path):
    # a mixer replayed from step 0 updates where the logged one did, with the same proportions
    write_log(tmp_path, "tscl", 11)
    res = replay(read_log(tmp_path), ["tscl", "baseline"])
    t = [r for r in res.rows if r["strategy"] == "tscl"]
    assert [r["step"] for r in t if r["mix_updated"]] == [4, 9]
    assert math.isnan(t[3]["target_math"]) is False
    b = [r for r in res.rows if r["strategy"] == "baseline"]
    assert all(math.isnan(r["target_math"]) for r in b)


def test_figures_on_a_baseline_log(tmp_path):
    _, pairs = write_log(tmp_path, "baseline", 3)
    res = replay(read_log(tmp_path), ["baseline", "difffilter"])
    for (batch, _), r in zip(pairs, [r for r in res.rows if r["strategy"] == "difffilter"]):
        rate = group_successes(batch, 0.5).double() / batch.group_size
        kept_groups = (rate > 0.2) & (rate < 0.8)
        kept = int(kept_groups[batch.group_ids].sum())
        assert r["kept"] == kept and r["retention"] == kept / batch.batch_size
        assert r["ess_fraction"] == pytest.approx(kept / batch.batch_size)  # 0/1 weights
        assert r["jaccard_logged"] == pytest.approx(kept / batch.batch_size)
        assert r["tokens"] == int(batch.response_length.sum())
    assert res.overall["baseline"]["exact_steps"] == 3
    assert res.overall["difffilter"]["exact_steps"] is None  # not the run's strategy
    assert {(p["a"], p["b"]) for p in res.pairwise} == {("baseline", "difffilter")}


def test_prerollout_replay_reports_skips_and_tokens_not_generated(tmp_path):
    # GRESO without exploration skips a prompt whose last group was all-correct or all-wrong
    spec = {
        "name": "greso0",
        "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}},
    }
    _, pairs = write_log(tmp_path, "baseline", 6)
    res = replay(read_log(tmp_path), [spec])
    rows = [r for r in res.rows if r["strategy"] == "greso0"]
    assert rows[0]["skip_rate"] == 0.0  # no history yet
    seen: dict[str, bool] = {}
    for (batch, _), r in zip(pairs, rows):  # plain-loop oracle
        G = batch.num_groups
        first = [int((batch.group_ids == g).nonzero()[0]) for g in range(G)]
        keys = [batch.prompt_keys[i] for i in first]
        skip = [seen.get(k, False) for k in keys]
        rows_skipped = [i for i in range(batch.batch_size) if skip[int(batch.group_ids[i])]]
        assert r["skip_rate"] == pytest.approx(sum(skip) / G)
        assert r["responses_saved"] == len(rows_skipped)
        assert r["tokens_saved"] == int(batch.response_length[rows_skipped].sum())
        rate = group_successes(batch, 0.5).double() / batch.group_size
        for k, g in zip(keys, rate.tolist()):
            seen[k] = g in (0.0, 1.0)
    assert res.overall["greso0"]["tokens_saved"] > 0


def test_segment_figures_match_plain_loops():
    rng = np.random.default_rng(0)
    bounds = np.array([0, 5, 5, 12, 20])
    x, y = rng.random(20), rng.random(20)
    y[5:12] = 0.7  # a constant step: NaN
    m = rng.random(20) < 0.8
    a, b = rng.random(20) < 0.5, rng.random(20) < 0.5
    corr, jac = _seg_corr(x, y, m, bounds), _seg_jaccard(a, b, bounds)
    for s in range(4):
        lo, hi = bounds[s], bounds[s + 1]
        sel = m[lo:hi]
        if hi == lo or len(set(y[lo:hi][sel])) <= 1:
            assert math.isnan(corr[s]) or hi == lo
        else:
            assert corr[s] == pytest.approx(np.corrcoef(x[lo:hi][sel], y[lo:hi][sel])[0, 1])
        union = (a[lo:hi] | b[lo:hi]).sum()
        assert jac[s] == pytest.approx((a[lo:hi] & b[lo:hi]).sum() / union if union else 1.0)
    same = _seg_corr(np.ones(4), np.ones(4), np.ones(4, bool), np.array([0, 4]))
    assert same[0] == 1.0


def test_missing_log_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="decision_log.enabled"):
        read_log(tmp_path)


def test_cli_writes_report_csv_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from dataflex_rl.cli import main

    write_log(tmp_path / "run" / "decisions", "baseline", 6)
    code = main(
        [
            "replay",
            str(tmp_path / "run"),
            "--strategy",
            "baseline",
            "--strategy",
            "maxvar",
            "--strategy",
            "dump_ucb",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    text = (tmp_path / "out" / "replay.md").read_text()
    assert "counterfactual" in text and "| maxvar |" in text and "6/6" in text
    for f in (
        "replay_steps.csv",
        "replay_pairwise.csv",
        "replay_summary.json",
        "plots/replay.png",
        "plots/replay_proportions.png",
    ):
        assert (tmp_path / "out" / f).is_file(), f
    assert "steps/s" in capsys.readouterr().out


WIDE_BAND = [
    "select.actuator.low=0.0",
    "select.actuator.high=1.0",
    "select.actuator.inclusive=true",
]


def test_overrides_set_parameters_of_every_replayed_strategy(tmp_path):
    write_log(tmp_path, "difffilter", 4)
    log = read_log(tmp_path)
    assert strategies_with_overrides([log.strategy, "maxvar"], []) == [log.strategy, "maxvar"]
    (wide,) = strategies_with_overrides([log.strategy], WIDE_BAND)
    assert wide["name"] == "difffilter"
    assert wide["select"]["actuator"] == {
        "name": "band",
        "low": 0.0,
        "high": 1.0,
        "inclusive": True,
    }
    own, wider = replay(log, [log.strategy]), replay(log, [wide])
    assert own.overall["difffilter"]["exact_steps"] == 4
    # the closed band [0, 1] keeps every group: retention 1, and no longer the logged decision
    assert wider.overall["difffilter"]["retention"] == 1.0
    assert wider.overall["difffilter"]["exact_steps"] is None
    assert own.overall["difffilter"]["retention"] < 1.0


def test_override_errors_name_the_override_and_the_strategy():
    with pytest.raises(ConfigError, match=r"^override select\.actuator\.low=abc: expected float"):
        strategies_with_overrides(["difffilter"], ["select.actuator.low=abc"])
    with pytest.raises(ConfigError, match=r"^override selct\.x=1: unknown key 'selct'.*'select'"):
        strategies_with_overrides(["difffilter"], ["selct.x=1"])
    # baseline has no select section: the override cannot complete one there
    with pytest.raises(ConfigError, match=r"^strategy baseline: override select\.actuator\.low"):
        strategies_with_overrides(["difffilter", "baseline"], ["select.actuator.low=0.1"])


def test_cli_takes_overrides_and_refuses_a_bad_one_before_replaying(tmp_path, capsys):
    from dataflex_rl.cli import main

    write_log(tmp_path / "run" / "decisions", "difffilter", 3)
    argv = ["replay", str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--no-plots"]
    assert main([*argv, "select.actuator.low=abc"]) == 2
    assert "error: override select.actuator.low=abc: expected float, got str ('abc')" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()
    assert main([*argv, *WIDE_BAND]) == 0
    row = next(r for r in capsys.readouterr().out.splitlines() if r.startswith("difffilter"))
    assert row.split()[:3] == ["difffilter", "1.000", "1.000"]  # retention, ESS: all kept
    assert (tmp_path / "out" / "replay.md").is_file()


def test_replay_binds_strategies_with_the_logged_adv_eps(tmp_path):
    from types import SimpleNamespace

    from dataflex_rl.harness.replay.replay import build_for_log

    spec = {"select": {"preset": "difffilter", "recompute_advantages": True}}
    st = Strategy(spec, domains=DOMAINS, adv_eps=1e-4)  # as the TRL host binds it
    config = SimpleNamespace(dir="log", steps_per_file=4, full_tokens=False, token_prob_mean=False)
    log = DecisionLog.from_config(
        config, tmp_path, strategy=st, domains=DOMAINS, host="trl", seed=0
    )
    b = make_batch(0)
    d = st.decide(b)
    log.record(b, d, target=st.proportions)
    log.close()
    data = read_log(tmp_path / "log")
    assert data.settings["adv_eps"] == 1e-4
    rebuilt = build_for_log(spec, data)
    assert rebuilt.adv_eps == 1e-4
    torch.testing.assert_close(
        rebuilt.decide(b).advantages_per_response, d.advantages_per_response, rtol=0, atol=0
    )
    # a log written before adv_eps was recorded: the old constant
    old = SimpleNamespace(settings={"advantage_estimator": "grpo"}, domains=DOMAINS)
    assert build_for_log(spec, old).adv_eps == 1e-6


MICRO = {
    "name": "high_entropy_micro",
    "tokens": {"preset": "high_entropy", "actuator": {"scope": "micro_batch"}},
}


def test_token_selection_replays_exactly_with_the_tokens_and_micro_batches(tmp_path):
    write_log(tmp_path, MICRO, 3, full_tokens=True, batch_kwargs={"micro_batches": True})
    log = read_log(tmp_path)
    assert log.columns["micro_batch"].tolist()[:4] == [0, 1, 0, 1]
    assert (log.columns["kept_tokens"] <= log.columns["length"]).all()
    res = replay(log, [MICRO])
    assert res.overall["high_entropy_micro"]["exact_steps"] == 3
    assert res.notes["high_entropy_micro"] == []


def test_token_selection_without_tokens_says_what_it_cannot_redo(tmp_path):
    write_log(tmp_path, MICRO, 3, batch_kwargs={"micro_batches": True})
    res = replay(read_log(tmp_path), [MICRO])
    # each response's mean entropy stands for its tokens: kept together, not the run's choice
    assert res.overall["high_entropy_micro"]["exact_steps"] == 0
    (note,) = res.notes["high_entropy_micro"]
    assert "mean entropy" in note and "full_tokens: true" in note
    write_log(tmp_path / "no_micro", MICRO, 2, full_tokens=True)
    res = replay(read_log(tmp_path / "no_micro"), [MICRO])
    assert any("per loss micro-batch" in n for n in res.notes["high_entropy_micro"])


def test_replaying_token_selection_on_a_log_without_entropies_is_refused(tmp_path):
    write_log(tmp_path, "topk", 2, batch_kwargs={"entropies": False})
    with pytest.raises(ConfigError, match="'high_entropy' reads per-token entropies"):
        replay(read_log(tmp_path), ["topk", "high_entropy"])


def test_a_curriculum_is_replayed_on_the_logged_draws_and_says_it_cannot_redo_them(tmp_path):
    # the log's steps table holds the draws' curriculum figures (NaN where none acted)
    from dataflex_rl.hosts.common.decision_log import DecisionLog

    st = Strategy("nemotron_curriculum", domains=DOMAINS)
    log = DecisionLog(tmp_path, domains=DOMAINS, strategy_spec=st.spec.to_dict(), host="test")
    for s in range(3):
        b = make_batch(s)
        figures = {"dataflex/curriculum/target": 0.8 - 0.0025 * s}
        if s:
            figures["dataflex/curriculum/drawn_pass_rate"] = 0.25
        log.record(b, st.decide(b), metrics=figures)
    log.close()
    data = read_log(tmp_path)
    assert data.steps["curriculum_target"].tolist() == pytest.approx([0.8, 0.7975, 0.795])
    drawn = data.steps["curriculum_drawn_pass_rate"]
    assert math.isnan(drawn[0]) and drawn[1:].tolist() == [0.25, 0.25]
    assert np.isnan(data.steps["curriculum_drawn_unseen"]).all()
    for name in ("nemotron_curriculum", "baseline"):  # replayed, or replaying another
        res = replay(read_log(tmp_path), [name])
        if name == "nemotron_curriculum":  # its own decisions: exact
            assert res.overall[name]["exact_steps"] == 3
        (note,) = res.notes[name]
        assert note.startswith("curriculum: ") and "cannot redo draws" in note
        assert "steps.curriculum_target" in note
        assert ("over-represent prompts" in note) and ("'nemotron_curriculum'" in note)
