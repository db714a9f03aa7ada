"""`Intake` and `domain_column`: the rows a host with a map-style dataset generates next.

Hand-worked quotas, pre-rollout accounting against the plain batch, and clear errors for a
missing domain column. Shared by the verl and TRL hosts; needs neither.
"""

import copy

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.tasks.datasets import domain_column
from tests.states import assert_moved


def test_domain_column_default_fallback_and_nested():
    rows = [
        {"data_source": "gsm8k", "extra_info": {"domain": "math"}},
        {"data_source": "kk", "extra_info": {"domain": "logic"}},
    ]
    assert domain_column(rows, None, None) == (["gsm8k", "kk"], "data_source")
    assert domain_column(rows, None, "extra_info.domain") == (
        ["math", "logic"],
        "extra_info.domain",
    )
    cols = {"domain": ["a", "b", "a"], "data_source": ["x", "x", "x"]}
    assert domain_column(None, cols, "domain") == (["a", "b", "a"], "domain")
    assert domain_column(None, cols, None) == (["a", "b", "a"], "domain")
    assert domain_column(None, cols, "data_source") == (["x", "x", "x"], "data_source")
    with pytest.raises(ConfigError, match=r"1 of 2 rows have no 'domain' \(first: row 1\)"):
        domain_column([{"domain": "a"}, {"x": 1}], None, "domain")


def test_a_domain_key_that_is_not_a_column_is_an_error_listing_the_columns():
    rows = [{"data_source": "gsm8k", "prompt": "p"}]
    # a set key never falls back silently to another column
    with pytest.raises(
        ConfigError,
        match=r"'domain' is not a column of the training set "
        r"\(columns: 'data_source', 'prompt'\)",
    ):
        domain_column(rows, None, "domain")
    with pytest.raises(ConfigError, match=r"'topic' is not a column .*columns: 'a', 'b', 'c'"):
        domain_column(None, {"a": [1]}, "topic", all_columns=["a", "b", "c"])
    with pytest.raises(ConfigError, match="'extra_info.domain' is not a column"):
        domain_column(rows, None, "extra_info.domain")
    with pytest.raises(ConfigError, match=r"neither 'domain' nor 'data_source' \(columns: 'q'\)"):
        domain_column([{"q": 1}], None, None)


def _static_strategy(prior):
    return Strategy(
        {"mix": {"actuator": {"name": "static", "floor": 0.0}, "prior": prior}},
        domains=("a", "b", "c"),
    )


def test_intake_follows_proportions_exactly():
    row_domains = ["a"] * 10 + ["b"] * 10 + ["c"] * 10
    intake = Intake.from_rows(row_domains, ("a", "b", "c"), seed=1)
    # prior 0.5/0.3/0.2 of n=7: floors 3, 2, 1 (sum 6); the 7th falls due first for a
    rows, doms, m = intake.draw(7, _static_strategy([0.5, 0.3, 0.2]), step=0)
    assert len(rows) == 7 and sorted(doms) == [0, 0, 0, 0, 1, 1, 2]
    assert all(row_domains[r] == "abc"[d] for r, d in zip(rows, doms))
    assert m["dataflex/mix/domain/a/target"] == pytest.approx(0.5)
    assert m["dataflex/mix/domain/a/actual"] == pytest.approx(4 / 7)


def test_intake_without_mix_uses_dataset_proportions():
    intake = Intake.from_rows(["a"] * 30 + ["b"] * 10, ("a", "b"), seed=0)
    strategy = Strategy({"prerollout": {"actuator": "greso"}})
    rows, doms, _ = intake.draw(8, strategy, step=0)
    assert sorted(doms) == [0] * 6 + [1] * 2


def _history_all_solved(strategy, rows, step=0):
    """One step in which every row gave an all-correct group of 2 (so GRESO may skip them)."""
    n = len(rows)
    batch = from_lists(
        [1.0] * 2 * n,
        [g for g in range(n) for _ in range(2)],
        prompt_keys=tuple(r for r in rows for _ in range(2)),
        step=step,
    )
    strategy.decide(batch)


def test_prerollout_skips_and_still_submits_exactly_n():
    intake = Intake.from_rows(["a"] * 40, ("a",), seed=3, candidate_factor=2.0)
    strategy = Strategy(
        {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}
    )
    easy = list(range(20))  # rows 0..19 were solved every time: always skipped
    _history_all_solved(strategy, easy)
    rows, _, m = intake.draw(10, strategy, step=1)
    assert len(rows) == 10 and not set(rows) & set(easy)
    assert m["dataflex/prerollout/skipped"] > 0 and m["dataflex/prerollout/forced"] == 0


def test_prerollout_fills_with_skipped_when_rounds_run_out():
    intake = Intake.from_rows(["a"] * 6, ("a",), seed=0, candidate_factor=1.0, max_rounds=2)
    strategy = Strategy(
        {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}
    )
    _history_all_solved(strategy, list(range(6)))  # everything is skippable
    rows, _, m = intake.draw(4, strategy, step=1)
    assert len(rows) == 4
    assert m["dataflex/prerollout/forced"] == 4 and m["dataflex/prerollout/rounds"] == 2


def test_the_audits_of_every_draw_of_a_step_are_taken_once():
    # everything skippable, audit 1: each draw audits its plain batch whole (2 then 1 rows)
    # and is filled with the next round's skipped candidates
    rows = list(range(20))
    intake = Intake([rows], ("a",), torch.ones(1), candidate_factor=1.0, max_rounds=2, audits=True)
    actuator = {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0, "audit": 1.0}
    strategy = Strategy({"prerollout": {"actuator": actuator}})
    _history_all_solved(strategy, rows)
    plain = _next_candidates(intake, [1.0], 6)
    _, _, m1 = intake.draw(2, strategy, step=1)
    _, _, m2 = intake.draw(1, strategy, step=1)  # a refill round of the same step
    assert m1["dataflex/prerollout/audited"] == 2.0 and m2["dataflex/prerollout/audited"] == 1.0
    # rounds: [0, 1] audited, [2, 3] fill; then [4] audited, [5] fills
    assert intake.take_audited(1) == ([plain[0], plain[1], plain[4]], [0, 0, 0])
    assert intake.take_audited(1) == ([], [])  # taken once
    intake.draw(1, strategy, step=2)
    with pytest.raises(RuntimeError, match="step 2's audited prompts were counted and never"):
        intake.draw(1, strategy, step=3)  # a host that forgot to generate them


def _next_candidates(intake, quota, n):
    """The rows the intake's sampler will draw next, in order (from a copy of it)."""
    drawn, _ = copy.deepcopy(intake.sampler).sample(torch.tensor(quota, dtype=torch.float64), n)
    return [intake.pools[d][i] for d, i in drawn]


def _remember(strategy, row, rewards, tokens, step=0):
    strategy.history.update(
        from_lists(
            rewards, [0] * len(rewards), tokens, prompt_keys=(row,) * len(rewards), step=step
        )
    )


def test_prerollout_accounting_against_the_plain_batch_by_hand():
    intake = Intake.from_rows(["a"] * 40, ("a",), seed=5, candidate_factor=2.0)
    strategy = Strategy(
        {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}
    )
    c = _next_candidates(intake, [1.0], 8)  # round 1: c[0..3] plain batch, c[4..7] spares
    _remember(strategy, c[1], [1.0, 1.0], [3, 5])  # skipped, 8 tokens
    _remember(strategy, c[3], [0.0, 0.0], [10, 10])  # skipped, 20 tokens
    _remember(strategy, c[5], [1.0, 1.0], [1, 1])  # a skipped spare saves nothing
    _remember(strategy, c[2], [1.0, 0.0], [50, 50])  # mixed: generated
    rows, _, m = intake.draw(4, strategy, step=1)
    assert rows == [c[0], c[2], c[4], c[6]]
    assert m["dataflex/prerollout/skipped"] == 2.0
    assert m["dataflex/prerollout/replacements"] == 2.0
    assert m["dataflex/prerollout/candidates_skipped"] == 3.0
    assert m["dataflex/prerollout/skipped_easy"] == 2.0
    assert m["dataflex/prerollout/skipped_hard"] == 1.0
    assert m["dataflex/prerollout/tokens_saved_est"] == 28.0
    assert m["dataflex/prerollout/forced"] == 0.0 and m["dataflex/prerollout/rounds"] == 1.0


def test_forced_prompts_of_the_plain_batch_are_not_counted_as_skipped():
    intake = Intake.from_rows(["a"] * 6, ("a",), seed=0, candidate_factor=1.0, max_rounds=2)
    strategy = Strategy(
        {"prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}}}
    )
    plain = _next_candidates(intake, [1.0], 4)
    _history_all_solved(strategy, list(range(6)))  # everything is skippable
    rows, _, m = intake.draw(4, strategy, step=1)
    # two rounds of 4 skipped candidates; the first 4 (the plain batch) fill the batch
    assert rows == plain
    assert m["dataflex/prerollout/candidates_skipped"] == 8.0
    assert m["dataflex/prerollout/skipped"] == 0.0 and m["dataflex/prerollout/replacements"] == 0.0
    assert m["dataflex/prerollout/tokens_saved_est"] == 0.0


def _static_strategy2(prior):
    return Strategy(
        {"mix": {"actuator": {"name": "static", "floor": 0.0}, "prior": prior}},
        domains=("a", "b"),
    )


def test_intake_state_round_trip():
    a = Intake.from_rows(["a"] * 5 + ["b"] * 7, ("a", "b"), seed=2)
    s = _static_strategy2([0.25, 0.75])
    a.draw(6, s, 0)
    state = a.state_dict()
    b = Intake.from_rows(["a"] * 5 + ["b"] * 7, ("a", "b"), seed=2)
    assert_moved(state, b.state_dict())
    # 6 at .25, .75: 1.5, 4.5 owed -> the half prompt carries, and is in the state
    assert state["sampler"]["deficit"].abs().sum() == pytest.approx(1.0)
    b.load_state_dict(state)
    for n in (1, 1, 3, 6, 1):  # one-prompt draws follow the carried deficit
        assert a.draw(n, s, 1)[:2] == b.draw(n, s, 1)[:2]


def test_unlisted_domain_is_an_error():
    with pytest.raises(ValueError, match=r"domains \['c'\] that are not listed"):
        Intake.from_rows(["a", "c"], ("a", "b"))


class _Columns:
    """A columnar view like a HF ``Dataset``: ``column_names`` and ``table[column]``."""

    def __init__(self, data: dict):
        self.data = data
        self.column_names = list(data)

    def __getitem__(self, column):
        return self.data[column]


def test_read_row_domains_columnar_and_row_by_row_agree(caplog):
    from dataflex_rl.hosts.common.intake import read_row_domains

    data = {"q": ["x", "y", "z"], "domain": ["math", "logic", "math"], "meta": [{"d": "a"}] * 3}
    rows = [{k: v[i] for k, v in data.items()} for i in range(3)]
    table = _Columns(data)
    assert read_row_domains(rows, None, table) == ["math", "logic", "math"]
    assert read_row_domains(rows, None) == ["math", "logic", "math"]  # no table: rows, warned
    assert "reading 3 rows one by one" in caplog.text
    assert read_row_domains(rows, "meta.d", table) == ["a", "a", "a"]
    with pytest.raises(ConfigError, match=r"'topic' is not a column .*'q', 'domain', 'meta'"):
        read_row_domains(rows, "topic", table)


def test_intake_for_takes_the_blocks_domains_or_the_sorted_distinct_ones():
    from types import SimpleNamespace

    from dataflex_rl.hosts.common.intake import intake_for

    block = SimpleNamespace(
        domains=None, proportions=None, seed=0, candidate_factor=2.0, max_draw_rounds=8
    )
    domains, intake = intake_for(block, ["b", "a", "b"])
    assert domains == ("a", "b") and intake.pools == [[1], [0, 2]]
    block.domains = ["b", "a"]
    domains, intake = intake_for(block, ["b", "a", "b"])
    assert domains == ("b", "a") and intake.pools == [[0, 2], [1]]
