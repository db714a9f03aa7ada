"""benchmarks/dynamic_sampling.py: its verdict lines write the MDE as the harness's report
does, "none" where no verdict is possible at the paired seeds (never "inf")."""

import math

import numpy as np

from dataflex_rl.harness.statistics.analysis import TOO_FEW, StatsOptions, analyze_summary
from tests.benchmarks import load

ds = load("dynamic_sampling")


def test_mde_words():
    assert ds.mde_words(math.inf) == "none"
    assert ds.mde_words(math.nan) == "n/a"
    assert ds.mde_words(0.0521) == "0.052"


def _comparison(seeds: int):
    # dapo 0.01 above grpo on every paired seed, with a little spread
    grpo = np.linspace(0.30, 0.40, seeds)
    dapo = grpo + 0.01 + np.linspace(0, 0.002, seeds)
    res = analyze_summary(
        "t", "average", ["grpo", "dapo"], np.stack([grpo, dapo]), "grpo", StatsOptions()
    )
    (c,) = res.comparisons
    return c


def test_two_seeds_allow_no_verdict_and_say_none():
    # 2 paired seeds: the exact sign-flip test's smallest p is 2 / 2^2 = .5 > alpha
    c = _comparison(2)
    assert math.isinf(c.mde) and not c.verdict_possible
    text = ds.comparison_text(c)
    assert text.endswith(f"{TOO_FEW} (2); MDE none)") and "inf" not in text


def test_enough_seeds_give_a_number():
    c = _comparison(8)
    assert math.isfinite(c.mde) and c.verdict_possible
    assert ds.comparison_text(c).endswith(f"MDE {c.mde:.3f})")


def test_a_difference_that_rounds_to_zero_has_no_minus_sign():
    c = _comparison(2)
    c.delta = -0.0004
    assert ds.comparison_text(c).startswith("dapo +0.000 (")
