"""Every preset's decision on one batch, worked out by hand.

The invariant tests (finite, gradient-free, permutation-invariant, deterministic, ...) would
pass for a strategy that keeps everything with weight 1; `check_hand_worked` gives each of
them one value such a strategy fails.

The batch: 3 groups of 4 responses, one per domain (math, logic, science), T = 4.

* group 0 (math): rewards 1, 0, 0, 0; lengths 2, 4, 1, 3. Solve rate 1/4. GRPO advantages:
  mean .25, unbiased std sqrt((.75^2 + 3 * .25^2) / 3) = .5, so A = 1.5, -.5, -.5, -.5.
* group 1 (logic): rewards 1, 1, 1, 1; lengths 1, 2, 3, 4. Solve rate 1; A = 0 (no signal).
* group 2 (science): rewards .9, .6, .9, .6; lengths 4, 4, 2, 2. Solve rate 1 (every reward
  > .5) but informative: mean .75, std sqrt(4 * .15^2 / 3) = sqrt(.03), A = +-.15 / sqrt(.03)
  = +-.8660.
* old log-probs: ln .5 on row 0's tokens (p = .5), 0 elsewhere (p = 1).
* entropies: .1 on every valid token but seven: 2 (row 0, token 0), 1.5 (1, 1), 3 (3, 2),
  .7 (6, 2), 1 (8, 3), .5 (9, 1), .4 (11, 1).

Informative rows (|A| > 0): 0-3 and 8-11.
"""

from __future__ import annotations

import functools
import math

import torch

from dataflex_rl import Strategy
from dataflex_rl.core.batch import RolloutBatch

DOMAINS = ("math", "logic", "science")
A2 = 0.15 / math.sqrt(0.03)  # group 2's |A| = .8660
R = 1 / math.sqrt(2)  # +-.5 / sqrt(.5) or +-.15 / sqrt(.045): a kept pair's GRPO advantage
#: (row, token) -> entropy of the seven high-entropy tokens (every other valid token: .1)
HIGH_ENTROPY = {
    (0, 0): 2.0,
    (1, 1): 1.5,
    (3, 2): 3.0,
    (6, 2): 0.7,
    (8, 3): 1.0,
    (9, 1): 0.5,
    (11, 1): 0.4,
}


def batch(step: int = 0) -> RolloutBatch:
    rewards = [1.0, 0, 0, 0, 1, 1, 1, 1, 0.9, 0.6, 0.9, 0.6]
    lengths = torch.tensor([2, 4, 1, 3, 1, 2, 3, 4, 4, 4, 2, 2])
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, A2, -A2, A2, -A2])
    mask = torch.arange(4)[None, :] < lengths[:, None]
    lp = torch.zeros(12, 4)
    lp[0] = math.log(0.5)
    ent = torch.full((12, 4), 0.1)
    for (i, t), e in HIGH_ENTROPY.items():
        ent[i, t] = e
    return RolloutBatch(
        rewards=torch.tensor(rewards),
        response_mask=mask,
        group_ids=torch.arange(12) // 4,
        domain_ids=torch.arange(12) // 4,
        domains=DOMAINS,
        advantages=adv[:, None] * mask,
        old_log_probs=lp,
        prompt_keys=tuple(f"p{g}" for g in range(3) for _ in range(4)),
        step=step,
        entropies=torch.where(mask, ent, torch.full_like(ent, 9.0)),  # 9: never read
    )


def _softmax_weights(scores: list[float]) -> list[float]:
    """Mean-1 weights exp(s) / mean exp(s) over the informative rows 0-3, 8-11; 1 for 4-7."""
    e = [math.exp(s) for s in scores]
    m = sum(e) / len(e)
    w = [x / m for x in e]
    return w[:4] + [1.0] * 4 + w[4:]


def _per_weights() -> list[float]:
    # (|A| + .01) ** .6, mean 1 over the 8 informative rows
    p = [(abs(a) + 0.01) ** 0.6 for a in (1.5, 0.5, 0.5, 0.5, A2, A2, A2, A2)]
    m = sum(p) / 8
    return [x / m for x in p[:4]] + [1.0] * 4 + [x / m for x in p[4:]]


def _ar_weights() -> list[float]:
    # raw .5 p + .5: row 0's 2 tokens .75, every other token 1; mean over the 22 tokens of the
    # informative rows (2 + 4 + 1 + 3 + 4 + 4 + 2 + 2) m = (2 * .75 + 20) / 22 = 21.5 / 22
    m = 21.5 / 22
    return [0.75 / m] + [1 / m] * 3 + [1.0] * 4 + [1 / m] * 4


def _softmax_proportions(values: list[float], T: float, floor: float) -> list[float]:
    e = [math.exp((v - max(values)) / T) for v in values]
    return [floor + (1 - 3 * floor) * x / sum(e) for x in e]


def _ucb_proportions() -> list[float]:
    # after 5 steps of this batch: |A| per domain .75, 0, .8660; 20 responses drawn from each,
    # N = 60: bonus sqrt(2 ln 60 / 20) for all
    bonus = math.sqrt(2 * math.log(60) / 20)
    return _softmax_proportions([0.75 + bonus, bonus, A2 + bonus], 0.1, 0.05)


#: preset -> (keep mask, weights per response, recomputed advantages or None, proportions or
#: None); proportions after steps 0..4 (the mixers' warm-up is 5 steps)
EXPECTED: dict[str, tuple] = {
    # baseline and static are the identity by definition: everything kept, weight 1, uniform
    "baseline": ([1] * 12, [1.0] * 12, None, None),
    # solve rate in (.2, .8): group 0 only
    "difffilter": ([1] * 4 + [0] * 8, [1.0] * 4 + [0.0] * 8, None, None),
    # reward std > 0: groups 0 and 2 (group 2's rewards differ though all exceed .5);
    # refilling is the host's (tests/unit/hosts/common/test_refill.py)
    "dapo": ([1] * 4 + [0] * 4 + [1] * 4, [1.0] * 4 + [0.0] * 4 + [1.0] * 4, None, None),
    # per group the 2 of largest variance, ties to the smallest a (a lowest + 2 - a highest):
    # group 0 sorted 0 (row 1), 0 (row 2), 0 (row 3), 1 (row 0): a = 0 keeps rows 3, 0;
    # group 1 constant: a = 0 keeps the last two (rows 6, 7); group 2 sorted .6 (9), .6 (11),
    # .9 (8), .9 (10): a = 1 (.6 and .9) keeps rows 9 and 10. Advantages recomputed per pair.
    "maxvar": (
        [1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0],
        [1.0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0],
        [R, 0, 0, -R, 0, 0, 0, 0, 0, -R, R, 0],
        None,
    ),
    # per group the 2 best reward / length, ties: higher reward, shorter: group 0 .5 (row 0),
    # then rows 1-3 tie at 0, row 2 is shortest; group 1 1/1, 1/2 (rows 4, 5); group 2 .45
    # (row 10), .3 (row 11)
    "gfpo": (
        [1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1],
        [1.0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1],
        [R, 0, -R, 0, 0, 0, 0, 0, 0, 0, R, -R],
        None,
    ),
    # the 6 largest |A|: 1.5 (row 0), .866 (rows 8-11), then the first .5 (row 1)
    "topk": (
        [1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
        [1.0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
        None,
        None,
    ),
    "softmax": ([1] * 12, _softmax_weights([1.5, 0.5, 0.5, 0.5, A2, A2, A2, A2]), None, None),
    "per": ([1] * 12, _per_weights(), None, None),
    # raw 2 in [.2, .8] (group 0), else 1; mean over the informative rows (2 x 4 + 1 x 4) / 8
    "diffband": ([1] * 12, [4 / 3] * 4 + [1.0] * 4 + [2 / 3] * 4, None, None),
    "ar": ([1] * 12, _ar_weights(), None, None),
    # 32 valid tokens, 25 at .1 then .4 .5 .7 1 1.5 2 3; the .8-quantile's rank is .8 x 31 =
    # 24.8: between the 25th and 26th sorted values, .1 + .8 x (.4 - .1) = .34. The seven
    # tokens above it are kept (`TOKEN_KEEP`); their rows are kept with weight 1 (row 6 too,
    # though its group has no signal: the selection reads entropies only)
    "high_entropy": (
        [1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1],
        [1.0, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1],
        None,
        None,
    ),
    # dapo's select keeps groups 0 and 2 (rows 0-3, 8-11: 10 + 12 = 22 valid tokens); the
    # token selection pools those only: 16 at .1 then .4 .5 1 1.5 2 3, rank .8 x 21 = 16.8,
    # threshold .4 + .8 x (.5 - .4) = .48. Kept: (0, 0) (1, 1) (3, 2) (8, 3) (9, 1); row 6's
    # .7 is in a dropped group and row 11's .4 is below the threshold (high_entropy alone
    # keeps both: its threshold over all 32 tokens is .34)
    "dapo_entropy": (
        [1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0],
        [1.0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0],
        None,
        None,
    ),
    # reward variances (unbiased) .25, 0, .03: total .28, 90% of it .252; in decreasing
    # variance group 0 (nothing before it) and group 2 (.25 before it, < .252) are kept, group
    # 1 (mass 0) never (tests/unit/select/test_top_p_mass.py: at p .8 group 0 alone)
    "ragen_snr": ([1] * 4 + [0] * 4 + [1] * 4, [1.0] * 4 + [0.0] * 4 + [1.0] * 4, None, None),
    # (r - mean) / mean over the host's A: group 0 mean .25, targets 3, -1 over A 1.5, -.5: 2;
    # group 1 A = 0: weight 1; group 2 mean .75, targets +-.2 over A +-.866: .2 / .866;
    # absolute weights (no mean 1)
    "maxrl": ([1] * 12, [2.0] * 4 + [1.0] * 4 + [0.2 / A2] * 4, None, None),
    "static": ([1] * 12, [1.0] * 12, None, [1 / 3] * 3),
    # mean rewards .25, 1, .75: gaps .75, 0, .25, softmax at T = .1, floor .05
    "reward_gap": ([1] * 12, [1.0] * 12, None, _softmax_proportions([0.75, 0, 0.25], 0.1, 0.05)),
    "dump_ucb": ([1] * 12, [1.0] * 12, None, _ucb_proportions()),
}
#: preset -> the (row, token) pairs its token-level selector keeps (other presets keep no
#: token mask)
TOKEN_KEEP = {
    "high_entropy": sorted(HIGH_ENTROPY),
    "dapo_entropy": [(0, 0), (1, 1), (3, 2), (8, 3), (9, 1)],
}
#: presets pinned by hand-worked unit tests over several steps instead (a learning-progress
#: slope needs rewards that change from step to step)
ELSEWHERE = {
    "tscl": "tests/unit/scorers/test_scorers.py::test_learning_progress_known_slope",
    # a curriculum decides nothing on a batch (keep all, weight 1): what it changes is which
    # prompts are drawn, worked out by hand over a small pool there
    "nemotron_curriculum": "tests/unit/curriculum/test_target_difficulty.py::test_hand_worked_*",
    # per-prompt budgets decide nothing on a batch either: what they change is how many
    # responses each prompt gets, worked out by hand there
    "reinforce_ada": "tests/unit/core/test_rollouts.py::test_hand_worked_*",
    "knapsack_rl": "tests/unit/core/test_rollouts.py::test_hand_worked_*",
    "adaptive_rollout": "tests/unit/core/test_rollouts.py::test_hand_worked_sequential_rounds",
}
#: (kind, registered name) -> the preset that runs the component with its default parameters
#: (and default scorer), or the unit test that works its values out by hand
COMPONENTS = {
    ("selector", "band"): "difffilter",
    ("selector", "max_variance"): "maxvar",
    ("selector", "gfpo"): "gfpo",
    ("selector", "top_fraction"): "topk",
    ("selector", "top_tokens"): "high_entropy",
    ("selector", "top_p_mass"): "ragen_snr",
    ("selector", "random_groups"): "tests/unit/select/test_random_groups.py::"
    "test_hand_worked_draws_and_decisions",
    ("reweighter", "softmax"): "softmax",
    ("reweighter", "per"): "per",
    ("reweighter", "band_weight"): "diffband",
    ("reweighter", "ar"): "ar",
    ("reweighter", "maxrl"): "maxrl",
    ("mixer", "static"): "static",
    ("mixer", "reward_gap"): "reward_gap",
    ("mixer", "ucb"): "dump_ucb",
    ("mixer", "softmax"): "tscl",
    ("scorer", "reward"): "maxvar",
    ("scorer", "solve_rate"): "difffilter",
    ("scorer", "reward_std"): "dapo",
    ("scorer", "reward_variance"): "ragen_snr",
    ("scorer", "efficiency"): "gfpo",
    ("scorer", "advantage_magnitude"): "topk",
    ("scorer", "token_prob"): "ar",
    ("scorer", "token_entropy"): "high_entropy",
    ("scorer", "domain_reward"): "reward_gap",
    ("scorer", "domain_advantage_magnitude"): "dump_ucb",
    ("scorer", "learning_progress"): "tscl",
    ("scorer", "response_length"): "tests/unit/scorers/test_scorers.py::test_length_and_efficiency",
    ("skip policy", "greso"): "tests/unit/prerollout/test_prerollout.py::test_greso_*",
    ("skip policy", "thompson"): "tests/unit/prerollout/test_prerollout.py::test_thompson_*",
    ("skip policy", "probe"): "tests/unit/prerollout/test_probe.py::test_probe_*",
    ("curriculum", "target_difficulty"): "tests/unit/curriculum/test_target_difficulty.py::"
    "test_hand_worked_*",
}


def check_component(kind: str, name: str) -> None:
    """`check_hand_worked` for the preset that runs this component (see `COMPONENTS`); a
    component registered without a hand-worked value anywhere fails here."""
    where = COMPONENTS.get((kind, name))
    assert where is not None, (
        f"{kind} {name!r} has no hand-worked value: add it to tests/hand_worked.py COMPONENTS "
        "(a preset running it, or the unit test that works its output out by hand)"
    )
    if where in EXPECTED:
        check_hand_worked(where)


@functools.cache
def check_hand_worked(preset: str) -> None:
    """``preset``'s decision on `batch` equals the hand-worked `EXPECTED` row (mixers: after
    steps 0..4, when the warm-up ends and the proportions update). Checked once per process
    (cached: the property tests call it for every example; a failure is not cached)."""
    if preset in ELSEWHERE:
        return
    keep, weights, advantages, proportions = EXPECTED[preset]
    s = Strategy(preset, domains=DOMAINS)
    for step in range(5 if proportions is not None else 1):
        d = s.decide(batch(step))
    assert d.keep_mask.tolist() == [bool(k) for k in keep], preset
    torch.testing.assert_close(
        d.weights_per_response, torch.tensor(weights), rtol=1e-5, atol=1e-6, msg=preset
    )
    if advantages is None:
        assert d.advantages_per_response is None, preset
    else:
        torch.testing.assert_close(
            d.advantages_per_response, torch.tensor(advantages), rtol=1e-5, atol=1e-6, msg=preset
        )
    if preset in TOKEN_KEEP:
        assert d.token_keep_mask.nonzero().tolist() == [list(p) for p in TOKEN_KEEP[preset]]
    else:
        assert d.token_keep_mask is None, preset
    if proportions is not None:
        torch.testing.assert_close(
            d.proportions,
            torch.tensor(proportions, dtype=torch.float64),
            rtol=1e-5,
            atol=1e-7,
            msg=preset,
        )
