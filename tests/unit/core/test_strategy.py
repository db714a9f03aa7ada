"""`Strategy`: build-time checks, schedules, decisions, edge cases, state."""

import math
import pickle
import warnings
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.base import Scorer
from dataflex_rl.core.batch import RolloutBatch, from_lists
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import StrategyWarning, check_strategy, group_parts
from dataflex_rl.presets import PRESETS
from tests.numerics import grpo_advantages
from tests.states import assert_moved

NAN = float("nan")
DOMAINS = ("math", "logic", "science")


@dataclass
class GroupMeanReward(Scorer):
    """A user's group-level scorer that forgot to set ``group_based``."""

    granularity: ClassVar[str] = "group"

    def score(self, batch):
        return batch.group_mean


@dataclass
class Longer(Scorer):
    """A user's response scorer: the response length."""

    def score(self, batch):
        return batch.response_length.to(torch.float32)


def _groups_of_five(corrects, advantages=False):
    rewards, gids = [], []
    for g, k in enumerate(corrects):
        rewards += [1.0] * k + [0.0] * (5 - k)
        gids += [g] * 5
    b = from_lists(rewards, gids)
    if advantages:
        b = b.replace(advantages=grpo_advantages(b, b.active_mask))
    return b


# ---------------------------------------------------------------- build-time checks
@pytest.mark.parametrize(
    "spec, match",
    [
        (
            {"select": {"actuator": "band", "scorer": "token_prob"}},
            "scorer 'token_prob' gives token-level scores, but select actuator 'band' accepts group, "
            "response-level",
        ),
        ({"select": {"actuator": "band", "scorer": "domain_reward"}}, "gives domain-level scores"),
        (
            {"select": {"actuator": "max_variance", "scorer": "solve_rate"}},
            "'max_variance' accepts response-level",
        ),
        (
            {"reweight": {"actuator": "ar", "scorer": "advantage_magnitude"}},
            "'ar' accepts token-level",
        ),
        ({"mix": {"actuator": "reward_gap", "scorer": "reward"}}, "accepts domain-level"),
    ],
)
def test_scorer_that_does_not_fit_its_actuator_is_rejected(spec, match):
    with pytest.raises(ConfigError, match=match):
        Strategy(spec, domains=DOMAINS)


@pytest.mark.parametrize(
    "spec",
    [
        "difffilter",
        "maxvar",
        "gfpo",
        "diffband",
        {"select": {"preset": "topk", "actuator": {"by_group": True}}},
        {"select": {"preset": "topk", "recompute_advantages": True}},
        {"select": {"actuator": "band", "scorer": f"{__name__}:GroupMeanReward"}},
    ],
)
def test_group_components_are_rejected_under_a_non_group_estimator(spec):
    with pytest.raises(
        ConfigError, match="needs prompt groups, but the advantage estimator 'gae' has none"
    ):
        Strategy(spec, advantage_estimator="gae")
    Strategy(spec, advantage_estimator="grpo")  # fine under a group estimator


@pytest.mark.parametrize("spec", ["topk", "softmax", "per", "ar", "baseline"])
def test_response_level_strategies_work_under_gae(spec):
    Strategy(spec, advantage_estimator="gae")


def test_unknown_advantage_estimator():
    with pytest.raises(ConfigError, match="advantage_estimator: unknown 'gpro'"):
        Strategy("baseline", advantage_estimator="gpro")


def test_scorer_needing_a_field_the_host_lacks_is_rejected():
    with pytest.raises(
        ConfigError,
        match=r"topk\.select\.scorer: AdvantageMagnitude needs "
        "advantages",
    ):
        Strategy("topk", available_fields=["rewards", "response_mask"])
    Strategy("topk", available_fields=["advantages"])


STATIC = {"name": "static", "floor": 0.0}


@pytest.mark.parametrize(
    "spec, host",
    [
        ("difffiltr", {}),  # unknown preset
        ("difffilter", {"advantage_estimator": "gae"}),  # group scorer, no groups
        ("ar", {"available_fields": ("rewards", "response_mask")}),  # a field the host lacks
        ("reward_gap", {}),  # a mixer without domains
        ({"mix": {"actuator": {**STATIC, "floor": 0.6}}}, {"domains": ("a", "b")}),
        ({"mix": {"actuator": STATIC, "prior": {"c": 1.0}}}, {"domains": ("a", "b")}),
        ("baseline", {"advantage_estimator": "ppo"}),
    ],
)
def test_check_strategy_raises_what_building_raises(spec, host):
    with pytest.raises(ConfigError) as built:
        Strategy(spec, **host)
    with pytest.raises(ConfigError) as checked:
        check_strategy(spec, **host)
    assert str(checked.value) == str(built.value)


def test_check_strategy_returns_the_parsed_spec_of_a_fitting_strategy():
    spec = check_strategy("dump_ucb", domains=("a", "b"), advantage_estimator="rloo")
    assert spec.name == "dump_ucb" and spec.mix is not None and spec.select is None


def test_group_parts_name_what_needs_prompt_groups():
    assert group_parts("difffilter") == ["select: SolveRate"]
    assert group_parts("maxvar") == ["select: MaxVariance", "select: recompute_advantages"]
    no_recompute = {"select": {"preset": "maxvar", "recompute_advantages": False}}
    assert group_parts(no_recompute) == ["select: MaxVariance"]
    assert group_parts("topk") == [] and group_parts("baseline") == []


def test_user_components_as_module_attr():
    # a user's scorer from the user's module, a built-in actuator by its import path;
    # band (2, 4) exclusive over lengths 2, 3, 4 keeps only the 3
    s = Strategy(
        {
            "select": {
                "actuator": {"name": "dataflex_rl.select.band:Band", "low": 2, "high": 4},
                "scorer": f"{__name__}:Longer",
            }
        }
    )
    d = s.decide(from_lists([1.0, 0.0, 1.0], [0, 0, 0], [2, 3, 4]))
    assert d.keep_mask.tolist() == [False, True, False]
    with pytest.raises(ConfigError, match="cannot import module"):
        Strategy({"select": {"actuator": "band", "scorer": "no_such_mod_xyz:Thing"}})
    with pytest.raises(TypeError, match="subclass of Scorer"):
        Strategy({"select": {"actuator": "band", "scorer": "dataflex_rl.select.band:Band"}})


# ---------------------------------------------------------------- schedules
def test_select_warmup_and_every():
    # warm-up 2, every 3: acts on steps 2, 5, 8; on other steps every active row is kept
    s = Strategy({"select": {"preset": "difffilter", "warmup_steps": 2, "every": 3}})
    acted = []
    for step in range(10):
        b = _groups_of_five([0, 2, 5]).replace(step=step)
        d = s.decide(b)
        acted.append(d.metrics["dataflex/select/active"] == 1.0)
        assert int(d.keep_mask.sum()) == (5 if acted[-1] else 15)
    assert [i for i, a in enumerate(acted) if a] == [2, 5, 8]


def test_reweight_warmup_and_every():
    s = Strategy({"reweight": {"preset": "per", "warmup_steps": 1, "every": 2}})
    b = from_lists([1.0, 0.0], [0, 0], advantages=[0.99, -3.99])
    acted = [s.decide(b.replace(step=t)).metrics["dataflex/reweight/active"] for t in range(6)]
    assert acted == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert s.decide(b.replace(step=0)).weights_per_response.tolist() == [1.0, 1.0]


# ---------------------------------------------------------------- decisions
def test_difffilter_decision_end_to_end():
    b = _groups_of_five([0, 2, 5], advantages=True)
    d = Strategy("difffilter").decide(b)
    assert d.keep_mask.tolist() == [False] * 5 + [True] * 5 + [False] * 5
    assert torch.equal(d.loss_mask, b.response_mask & d.keep_mask[:, None])
    assert torch.equal(d.weights_per_token, d.loss_mask.float())
    assert d.renormalizes and not d.drops_tokens and d.advantages is None
    assert torch.equal(d.denominator_mask, d.loss_mask)  # the kept rows' tokens
    m = d.metrics
    assert m["dataflex/kept_response_fraction"] == pytest.approx(1 / 3)
    assert m["dataflex/kept_group_fraction"] == pytest.approx(1 / 3)
    assert m["dataflex/kept_token_fraction"] == pytest.approx(1 / 3)
    assert m["dataflex/zero_advantage_group_fraction"] == pytest.approx(2 / 3)
    assert m["dataflex/select/recompute_advantages"] == 0.0
    assert m["dataflex/weight_mean"] == 1.0 and m["dataflex/weight_ess"] == 5.0


def test_baseline_keeps_every_active_row_with_weight_1():
    b = from_lists(
        [1.0, NAN, 0.0, 1.0],
        [0, 0, 0, 1],
        [2, 3, 1, 2],
        is_padding=torch.tensor([False, False, False, True]),
    )
    d = Strategy("baseline").decide(b)
    assert d.keep_mask.tolist() == [True, False, True, False]
    assert d.weights_per_response.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert d.metrics["dataflex/invalid_reward_responses"] == 1.0
    assert d.metrics["dataflex/padding_responses"] == 1.0
    assert d.metrics["dataflex/responses"] == 2.0


def test_grpo_advantages_hand_worked():
    # group 0 kept rewards 1, 0, 0, 1: mean .5, unbiased std sqrt(4 * .25 / 3) = sqrt(1/3)
    # -> A = +-.5 / (sqrt(1/3) + 1e-6) = +-0.866...; row 4 dropped -> 0
    # group 1: only one kept row -> 0 (nothing to compare with)
    b = from_lists([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], [0, 0, 0, 0, 0, 1, 1], [2] * 7)
    keep = torch.tensor([True, True, True, True, False, True, False])
    adv = grpo_advantages(b, keep)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv[:, 0].tolist() == pytest.approx([a, -a, -a, a, 0.0, 0.0, 0.0])
    assert adv.shape == (7, 2) and torch.equal(adv[:, 0], adv[:, 1])
    # Dr. GRPO: no division by the std
    adv = grpo_advantages(b, keep, norm_by_std=False)
    assert adv[:, 0].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0])


def test_maxvar_recomputes_advantages_on_the_kept_subset():
    # rewards 0, .2, .5, .9, 1, 1 keep 3 -> {0, 1, 1}: mean 2/3, std sqrt((4/9+1/9+1/9)/2)
    b = from_lists([0.9, 1.0, 0.0, 0.5, 1.0, 0.2], [0] * 6, advantages=[0.1] * 6)
    d = Strategy("maxvar").decide(b)
    std = math.sqrt((4 / 9 + 1 / 9 + 1 / 9) / 2)
    hi, lo = (1 / 3) / (std + 1e-6), -(2 / 3) / (std + 1e-6)
    assert d.advantages[:, 0].tolist() == pytest.approx([0, hi, lo, 0, hi, 0], abs=1e-6)
    assert d.metrics["dataflex/select/recompute_advantages"] == 1.0
    d = Strategy(
        {"select": {"preset": "maxvar", "recompute_advantages": False, "renormalize": False}}
    ).decide(b)
    assert d.advantages is None and not d.renormalizes


def test_reweight_uses_the_recomputed_advantages():
    # maxvar keeps {0, 1, 1}; softmax over the recomputed |A| (2 rows at hi, 1 at |lo|)
    b = from_lists([0.9, 1.0, 0.0, 0.5, 1.0, 0.2], [0] * 6, advantages=[0.1] * 6)
    d = Strategy({"select": "maxvar", "reweight": "softmax"}).decide(b)
    w = d.weights_per_response
    assert w[[0, 3, 5]].tolist() == [0.0, 0.0, 0.0]
    assert float(w[[1, 2, 4]].mean()) == pytest.approx(1.0)
    assert float(w[2]) > float(w[1]) == pytest.approx(float(w[4]))  # |lo| > hi


def test_every_response_dropped_gives_zero_weights_a_metric_and_a_warning():
    b = _groups_of_five([0, 5, 5], advantages=True)
    s = Strategy({"select": "difffilter", "reweight": "softmax"})
    with pytest.warns(StrategyWarning, match="dropped every response"):
        d = s.decide(b)
    assert not d.keep_mask.any() and torch.equal(d.weights_per_token, torch.zeros(15, 4))
    assert d.metrics["dataflex/all_dropped"] == 1.0
    assert d.metrics["dataflex/kept_response_fraction"] == 0.0
    assert d.metrics["dataflex/weight_ess_fraction"] == 0.0
    assert all(math.isfinite(v) for v in d.metrics.values())


@pytest.mark.parametrize("preset", list(PRESETS))
def test_empty_batch_is_defined_for_every_preset(preset):
    b = RolloutBatch(
        rewards=torch.zeros(0),
        response_mask=torch.zeros(0, 3, dtype=torch.bool),
        group_ids=torch.zeros(0, dtype=torch.int64),
        domains=DOMAINS,
        domain_ids=torch.zeros(0, dtype=torch.int64),
        advantages=torch.zeros(0, 3),
        old_log_probs=torch.zeros(0, 3),
        entropies=torch.zeros(0, 3),
        prompt_keys=(),
    )
    s = Strategy(preset, domains=DOMAINS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing was there to drop
        d = s.decide(b)
    assert d.keep_mask.shape == (0,) and d.weights_per_token.shape == (0, 3)
    assert all(math.isfinite(v) for v in d.metrics.values())
    assert d.metrics["dataflex/all_dropped"] == 0.0


def test_only_invalid_rows_is_not_all_dropped():
    b = from_lists([NAN, float("inf")], [0, 0], advantages=[1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = Strategy("difffilter").decide(b)
    assert not d.keep_mask.any() and d.metrics["dataflex/all_dropped"] == 0.0
    assert d.metrics["dataflex/invalid_reward_responses"] == 2.0


def test_single_response_groups():
    # solve rate of a single response is 0 or 1: difffilter drops it; maxvar keeps it (n=1)
    b = from_lists([1.0, 0.0], [0, 1], advantages=[0.0, 0.0])
    with pytest.warns(StrategyWarning):
        assert not Strategy("difffilter").decide(b).keep_mask.any()
    d = Strategy("maxvar").decide(b)
    assert d.keep_mask.tolist() == [True, True]
    assert d.advantages.abs().sum() == 0  # nothing to compare with -> advantage 0


def test_ties_are_deterministic():
    b = from_lists([1.0] * 6, [0] * 6, advantages=[0.5] * 6)
    d1 = Strategy("topk").decide(b)
    d2 = Strategy("topk").decide(b)
    assert d1.keep_mask.tolist() == [True, True, True, False, False, False]
    assert torch.equal(d1.keep_mask, d2.keep_mask)


def test_weights_per_response():
    b = from_lists([1.0, 0.0], [0, 0], [2, 0], advantages=[0.5, -0.5])
    d = Strategy("baseline").decide(b)
    assert d.weights_per_response.tolist() == [1.0, 0.0]  # no valid token -> 0


def test_per_domain_metrics_count_groups_of_each_domain():
    # groups 0 (logic), 1 (math), 2 (logic): actual logic 2/3, math 1/3, science 0
    b = from_lists(
        [1.0, 0.0, 1.0, 0.0],
        [0, 1, 2, 2],
        domain_ids=torch.tensor([1, 0, 1, 1]),
        domains=DOMAINS,
        advantages=[1.0, 1.0, 1.0, 1.0],
    )
    m = Strategy("reward_gap", domains=DOMAINS).decide(b).metrics
    assert m["dataflex/batch/domain/logic/actual"] == pytest.approx(2 / 3)
    assert m["dataflex/batch/domain/math/actual"] == pytest.approx(1 / 3)
    assert m["dataflex/batch/domain/science/actual"] == 0.0
    # the draw's target is the host's figure (dataflex/mix/domain/<d>/target), not the
    # strategy's; before its first update the mixer has no signal
    assert not any("/target" in k or "/signal" in k for k in m)


def test_domains_that_share_a_metric_name_are_refused():
    with pytest.raises(ConfigError, match="'openai/gsm8k' and 'openai_gsm8k' are both written"):
        Strategy("baseline", domains=("openai/gsm8k", "openai_gsm8k"))


# ---------------------------------------------------------------- state
def _stream(n, seed=0):
    """n batches over 3 domains, 4 groups of 4, with advantages, log-probs and prompt keys."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(n):
        B, T = 16, 5
        rewards = (torch.rand(B, generator=g) < 0.5).float()
        gids = torch.arange(B) // 4
        keys = tuple(f"p{int(torch.randint(0, 6, (1,), generator=g))}" for _ in range(4))
        b = RolloutBatch(
            rewards=rewards,
            response_mask=torch.ones(B, T, dtype=torch.bool),
            group_ids=gids,
            domain_ids=gids % 3,
            domains=DOMAINS,
            old_log_probs=-torch.rand(B, T, generator=g),
            prompt_keys=tuple(keys[i] for i in gids.tolist()),
            step=step,
            # a generator of their own: the other fields stay what they were without them
            entropies=torch.rand(B, T, generator=torch.Generator().manual_seed(seed + step)),
        )
        out.append(b.replace(advantages=grpo_advantages(b, b.active_mask)))
    return out


STATEFUL_SPECS = [
    *PRESETS,
    {
        "name": "all",
        "prerollout": {"actuator": "greso", "history_size": 2},
        "mix": {"preset": "tscl", "warmup_steps": 2, "every": 2},
        "select": "difffilter",
        "reweight": "ar",
    },
    {  # token selection beside every other mechanism, group selection and refill included
        "name": "all_tokens",
        "prerollout": {"actuator": "greso", "history_size": 2},
        "mix": {"preset": "tscl", "warmup_steps": 2, "every": 2},
        "select": "dapo",
        "tokens": {"preset": "high_entropy", "warmup_steps": 1},
        "reweight": "ar",
        "refill": {"max_rounds": 2},
    },
    {"name": "ucb", "mix": {"preset": "dump_ucb", "warmup_steps": 1, "every": 1}},
    {"name": "gap", "mix": {"preset": "reward_gap", "warmup_steps": 1, "every": 2}},
]


def _run(s, batches, prompt_gen_seed):
    out = []
    for b in batches:
        keep, _ = s.filter_prompts(
            [f"p{i}" for i in range(6)],
            b.step,
            torch.Generator().manual_seed(prompt_gen_seed + b.step),
        )
        d = s.decide(b)
        out.append((keep, d.keep_mask, d.weights_per_token, d.proportions, s.proportions, s.signal))
    return out


def _same(x, y):
    if x is None or y is None:
        return x is None and y is None
    return x.dtype == y.dtype and torch.equal(x, y)


@pytest.mark.parametrize(
    "spec", STATEFUL_SPECS, ids=lambda s: s if isinstance(s, str) else s["name"]
)
def test_state_round_trip_restores_behaviour_exactly(spec):
    batches = _stream(14)
    a = Strategy(spec, domains=DOMAINS)
    _run(a, batches[:7], 100)
    state = a.state_dict()
    if "mix" in a.parts or "prerollout" in a.parts:  # stateful: the state moved
        assert_moved(state, Strategy(spec, domains=DOMAINS).state_dict())
    state_copy = pickle.loads(pickle.dumps(state))  # as a checkpoint would store it
    after_a = _run(a, batches[7:], 100)  # the original keeps going
    b = Strategy(spec, domains=DOMAINS)
    b.load_state_dict(state)
    c = Strategy(spec, domains=DOMAINS)
    c.load_state_dict(state_copy)
    for other in (b, c):
        after = _run(other, batches[7:], 100)
        for ra, rb in zip(after_a, after):
            assert all(_same(x, y) for x, y in zip(ra, rb))


def test_load_state_dict_rejects_another_spec():
    state = Strategy("difffilter").state_dict()
    with pytest.raises(ValueError, match="saved with strategy"):
        Strategy("maxvar").load_state_dict(state)


def test_strategy_pickles_mid_run():
    s = Strategy(STATEFUL_SPECS[-3], domains=DOMAINS)
    batches = _stream(6)
    _run(s, batches[:3], 0)
    assert_moved(s.state_dict(), Strategy(STATEFUL_SPECS[-3], domains=DOMAINS).state_dict())
    s2 = pickle.loads(pickle.dumps(s))
    for ra, rb in zip(_run(s, batches[3:], 0), _run(s2, batches[3:], 0)):
        assert all(_same(x, y) for x, y in zip(ra, rb))


@pytest.mark.parametrize("spec", ["baseline", "softmax", "maxvar", "ar"])
def test_write_weights_per_token_equals_weights_per_token(spec):
    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        group_ids=torch.tensor([0, 0, 0, 0]),
        response_mask=torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]),
        advantages=torch.tensor([[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0], [0.5] * 3, [0.0] * 3]),
        old_log_probs=-torch.rand(4, 3),
    )
    d = Strategy(spec).decide(b)
    out = torch.full((4, 3), float("nan"))
    assert d.write_weights_per_token(out) is out
    fresh = Strategy(spec).decide(b).weights_per_token
    assert torch.equal(out, fresh)
    with pytest.raises(
        ValueError, match=r"out must be a contiguous float32 tensor of shape \(4, 3\)"
    ):
        d.write_weights_per_token(torch.zeros(4, 3, dtype=torch.float64))


def test_recomputed_advantages_use_the_hosts_std_constant():
    # one group [1, 0, 0], difffilter keeps it whole: mean 1/3, unbiased std sqrt(1/3);
    # A = (r - 1/3) / (sqrt(1/3) + eps): eps 0.25 gives 0.8058 for the 1, -0.4029 for the 0s
    from dataflex_rl.core.batch import RolloutBatch
    from dataflex_rl.core.registry import ConfigError

    b = RolloutBatch(
        rewards=torch.tensor([1.0, 0.0, 0.0]),
        response_mask=torch.ones(3, 2, dtype=torch.bool),
        group_ids=torch.zeros(3, dtype=torch.int64),
        advantages=torch.zeros(3, 2),
    )
    spec = {"select": {"preset": "difffilter", "recompute_advantages": True}}
    std = math.sqrt(1 / 3)
    for eps in (0.25, 1e-6):
        a = Strategy(spec, adv_eps=eps).decide(b).advantages_per_response
        want = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (std + eps)
        torch.testing.assert_close(a, want, rtol=1e-6, atol=0.0)
    assert Strategy(spec, adv_eps=0.25).decide(b).advantages_per_response[0] == pytest.approx(
        0.80578, abs=1e-5
    )
    for bad in (0.0, -1e-6, "1e-4", True):
        with pytest.raises(ConfigError, match="adv_eps: must be a number > 0"):
            Strategy(spec, adv_eps=bad)
