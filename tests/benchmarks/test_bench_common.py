"""benchmarks/bench_common.py: the helpers next_strategies.py and async_staleness.py share,
on hand-worked values."""

import math
from types import SimpleNamespace

import pandas as pd

from dataflex_rl.core.registry import ConfigError
from tests.benchmarks import load

bc = load("bench_common")


def test_numbers_and_means():
    assert bc.num(1.26) == "1.3" and bc.num(-0.04, 2, signed=True) == "-0.04"
    assert bc.num(3.0, 0, signed=True) == "+3"
    assert [bc.num(v) for v in (None, "", math.nan, math.inf)] == ["n/a"] * 4
    assert bc.mean([1, 2, math.nan, "x", 6]) == 3.0
    assert math.isnan(bc.mean([math.nan]))
    assert bc.ratio(3.0, 4.0) == 0.75
    assert math.isnan(bc.ratio(1.0, 0.0)) and math.isnan(bc.ratio(1.0, math.nan))


def _comparison(possible: bool):
    return SimpleNamespace(
        verdict_possible=possible,
        verdict="better",
        seeds_for_verdict=7,
        n_pairs=2,
        delta=0.012,
        corrected_ci=(-0.004, 0.031),
        level=0.05,
        p=0.0117,
        p_holm=0.0234,
    )


def test_comparison_cells_and_effect_text():
    c = bc.comparison_cells(_comparison(True), 100.0)
    assert math.isclose(c["delta"], 1.2) and math.isclose(c["ci_high"], 3.1)
    assert c["verdict"] == "better" and c["p_text"] == "0.023" and c["p"] == 0.0117
    assert math.isclose(c["ci_level"], 0.95)
    assert bc.effect_text(c) == "+1.2 [-0.4, +3.1]"
    row = {f"vs_k0_{k}": v for k, v in c.items()}
    assert bc.effect_text(row, "vs_k0_") == "+1.2 [-0.4, +3.1]"
    assert bc.effect_text(row, "vs_baseline_") == ""  # no such comparison in the row
    few = bc.comparison_cells(_comparison(False), 100.0)
    assert few["verdict"] == "not enough paired seeds (2; needs 7)"
    assert bc.effect_text(few) == "+1.2 n/a"


def test_write_csv_reads_back_with_pandas(tmp_path):
    path = tmp_path / "sub" / "t.csv"
    bc.write_csv([{"a": 1, "b": "x", "c": 9}, {"a": 2.5}], ["a", "b"], path)
    df = pd.read_csv(path)
    assert list(df.columns) == ["a", "b"]
    assert df["a"].tolist() == [1.0, 2.5] and df["b"].isna().tolist() == [False, True]


def test_config_errors_exit_2_with_the_message(capsys):
    def bad() -> int:
        raise ConfigError("unknown strategy preset 'nope'")

    assert bc.config_errors(bad) == 2
    assert "error: unknown strategy preset 'nope'" in capsys.readouterr().err
    assert bc.config_errors(lambda: 0) == 0


def test_shown_is_relative_inside_the_repository(tmp_path):
    assert str(bc.shown(bc.ROOT / "benchmarks" / "x.py")) == "benchmarks/x.py"
    assert bc.shown(tmp_path) == tmp_path
