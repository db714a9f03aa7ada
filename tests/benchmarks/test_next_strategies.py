"""benchmarks/next_strategies.py: the group figures from a hand-made run folder (metrics and
decision log), arms refused up front, the pooled ratios, and the whole script on 1 seed x 2
steps through the harness (both regimes)."""

import csv
import json
import math

import pandas as pd
import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.decision_log import RESPONSES
from dataflex_rl.hosts.host import METRICS_FILE
from tests.benchmarks import load

ns = load("next_strategies")


def _write_run(path, groups, steps_metrics):
    """A run folder: ``groups`` [(step, group, rewards, keep, discarded)] as the decision
    log's response rows (one padding row per step too), ``steps_metrics`` as train lines."""
    rows = []
    for step, group, rewards, keep, discarded in groups:
        rows += [
            dict(step=step, group=group, is_padding=False, reward=r, keep=keep, discarded=discarded)
            for r in rewards
        ]
    for step in {g[0] for g in groups}:  # padding never counts
        rows.append(
            dict(step=step, group=99, is_padding=True, reward=0.0, keep=False, discarded=False)
        )
    log = path / "decisions" / RESPONSES
    log.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(log / "part-000000000.parquet")
    lines = [{"kind": "train", "step": i, **m} for i, m in enumerate(steps_metrics)]
    lines.append({"kind": "eval", "step": len(steps_metrics), "eval/mean/sampled": 0.3})
    (path / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_run_figures_by_hand(tmp_path):
    # step 0: a mixed group of 4 (kept), an all-correct group of 2 (kept), a mixed group of
    # 6 dropped by the strategy; step 1: an all-wrong group of 4 (kept), a mixed group of 2
    # (kept), a discarded refill group of 4 (mixed, never trained on)
    _write_run(
        tmp_path,
        [
            (0, 0, [1, 0, 0, 1], True, False),
            (0, 1, [1, 1], True, False),
            (0, 2, [1, 0, 0, 0, 0, 0], False, False),
            (1, 0, [0, 0, 0, 0], True, False),
            (1, 1, [0, 1], True, False),
            (1, 2, [1, 0, 1, 1], False, True),
        ],
        [
            {"engine/generation_cost_tokens": 120.0, "dataflex/rollouts/per_prompt_max": 6},
            {"engine/generation_cost_tokens": 80.0, "dataflex/rollouts/per_prompt_max": 4},
        ],
    )
    f = ns.run_figures(tmp_path)
    assert (f["steps"], f["cost"]) == (2, 200.0)
    # generated: 6 groups, 2 zero-variance; trained (kept, not discarded): 4, 2 zero-variance
    assert (f["groups_generated"], f["zero_generated"]) == (6, 2)
    assert (f["groups_trained"], f["zero_trained"], f["effective"]) == (4, 2, 2)
    assert f["responses"] == {4: 3, 2: 2, 6: 1}
    assert f["responses_metrics"] == {"dataflex/rollouts/per_prompt_max": 5.0}


def _figures(effective, cost, steps=10, responses=None):
    return {
        "steps": steps,
        "cost": cost,
        "groups_generated": 16 * steps,
        "zero_generated": 16 * steps - effective,
        "groups_trained": 16 * steps,
        "zero_trained": 16 * steps - effective,
        "effective": effective,
        "responses": responses or {8: 16 * steps},
        "responses_metrics": {},
    }


class _Exp:
    def __init__(self, seeds, tokens=None):
        self.seeds = seeds
        self.budget = type("B", (), {"generated_tokens": tokens})()


def test_pooled_rates_and_paired_ratios():
    figures = {
        ("baseline", 0): _figures(100, 10_000),
        ("baseline", 1): _figures(120, 10_000),
        # seed 0: 150 / 10,000 (1.5x the baseline's), seed 1: 120 / 8,000 (1.25x), one run
        # short of the 9,000-token budget (capped)
        ("arm", 0): _figures(150, 10_000, responses={2: 40, 16: 10}),
        ("arm", 1): _figures(120, 8_000, responses={8: 50}),
    }
    p = ns._pooled("arm", _Exp([0, 1], tokens=9_000), figures, {0: 0.01, 1: 0.012})
    assert p["effective_per_1k"] == pytest.approx(1000 * 270 / 18_000)  # 15
    assert p["tokens_per_effective"] == pytest.approx(18_000 / 270)
    # pooled: 270 / 18,000 against the baseline's 220 / 20,000
    assert p["effective_per_1k_ratio"] == pytest.approx((270 / 18_000) / (220 / 20_000))
    assert (p["ratio_seed_min"], p["ratio_seed_max"]) == pytest.approx((1.25, 1.5))
    assert p["steps_capped"] == 1 and p["cost_mean"] == 9_000
    # responses per prompt over 100 generated groups: 2 x 40 + 16 x 10 + 8 x 50 = 640
    assert p["responses_per_prompt_mean"] == pytest.approx(6.4)
    assert (p["responses_per_prompt_min"], p["responses_per_prompt_max"]) == (2, 16)
    assert p["responses_histogram"] == "2:40 8:50 16:10"
    b = ns._pooled("baseline", _Exp([0, 1]), figures, {0: 0.01, 1: 0.012})
    assert b["effective_per_1k_ratio"] == 1.0 and b["steps_capped"] == 0


def test_token_budget_is_the_baselines_mean_cost_rounded():
    figures = {("baseline", 0): _figures(1, 16_440), ("baseline", 1): _figures(1, 16_530)}
    assert ns.token_budget(figures, [0, 1]) == 16_500  # mean 16,485
    with pytest.raises(RuntimeError, match="--tokens"):
        ns.token_budget(figures, [2])


def test_unknown_presets_are_refused_before_any_run():
    assert ns.check_arms(["baseline", "maxrl", "maxrl", "ragen_snr"]) == ["maxrl", "ragen_snr"]
    with pytest.raises(ConfigError, match="unknown strategy preset 'nope'.*Presets: baseline"):
        ns.check_arms(["maxrl", "nope"])


def test_experiment_sets_the_regime_and_keeps_the_instrument():
    base = {
        "name": "quick",
        "strategies": ["baseline", "difffilter"],
        "seeds": 2,
        "controls": ["aa"],
        "engine": {"policy": "tiny", "optim": {"lr": 0.02}},
        "budget": {"steps": 200, "prompts_per_step": 16},
        "evaluation": {"metric": "sampled", "every": 100, "samples": 4},
    }
    d = ns.experiment(base, "x", ["maxrl"], [0, 1, 2], 300, tokens=5000, per_domain=20)
    assert d["strategies"] == ["baseline", "maxrl"] and d["seeds"] == [0, 1, 2]
    assert "controls" not in d
    assert d["budget"] == {"steps": 300, "prompts_per_step": 16, "generated_tokens": 5000}
    assert d["evaluation"] == {"metric": "sampled", "every": 0, "samples": 4, "per_domain": 20}
    assert d["engine"]["decision_log"] == {"enabled": True} and d["engine"]["threads"] == 1
    assert d["engine"]["optim"] == {"lr": 0.02}
    assert base["budget"]["steps"] == 200  # the file's data is not changed


def test_the_script_end_to_end(tmp_path, capsys):
    # 1 seed x 2 steps, plain GRPO and maxrl, both regimes: 4 engine runs through the harness
    argv = ["--seeds", "0", "--steps", "2", "--arms", "maxrl", "--per-domain", "5"]
    argv += ["--workers", "1", "--out", str(tmp_path), "--no-progress"]
    assert ns.main(argv) == 0
    with open(tmp_path / "next_strategies.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["regime"], r["arm"]) for r in rows] == [
        ("steps 2", "baseline"),
        ("steps 2", "maxrl"),
        (f"tokens {rows[2]['regime'].split()[1]}", "baseline"),
        (rows[2]["regime"], "maxrl"),
    ]
    tokens = int(rows[2]["regime"].split()[1])
    assert tokens == round(float(rows[0]["cost_mean"]) / 100) * 100
    for r in rows:
        assert r["runs"] == "1" and r["failed"] == ""
        assert float(r["steps_mean"]) >= 2 and float(r["responses_per_prompt_mean"]) == 8
        assert 0 <= float(r["zv_share_trained"]) <= 1
    assert rows[1]["verdict"].startswith("not enough paired seeds (1; needs 6)")
    assert float(rows[0]["effective_per_1k_ratio"]) == 1.0
    assert not math.isnan(float(rows[1]["tokens_per_effective"]))
    out = capsys.readouterr().out
    assert "| steps 2 | maxrl | 1 |" in out
    assert (tmp_path / "next_strategies.md").read_text().startswith("# Next strategies")
    assert (tmp_path / "equal_steps-2" / "report.md").exists()
    assert (tmp_path / f"equal_tokens-{tokens}" / "report.md").exists()
