"""``greso``'s false-skip control: a controlled run threshold per kind (hand-worked)."""

import hashlib
import math
import pickle

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.prerollout.greso import NO_SKIP_RUN, Greso
from dataflex_rl.prerollout.probe import false_skip_bound
from tests.states import assert_moved, state_equal
from tests.unit.prerollout.groups import group_batch as _batch

EASY, HARD, MIXED = [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]
P = "dataflex/prerollout/"


def _controlled(**kw) -> Greso:
    # no exploration (a skippable candidate is always skipped), every plain candidate sampled
    # (audit 1); target .4 at confidence .6: U(k, n) <= .4 iff P(Bin(n, .4) <= k) <= .4
    params = dict(explore_prob=0.0, min_explore=0.0, adapt_step=0.0, audit=1.0)
    params.update(max_false_skip=0.4, confidence=0.6, **kw)
    return Greso(**params)


def _step(g: Greso, h: PromptHistory, step: int, groups: dict, plain=None):
    """One step as the host runs it: filter, audit the plain batch's skips, observe the
    audited groups, then the generated ones (and the history records both)."""
    keys = list(groups)
    keep, m = g.filter(h, keys, step, torch.Generator().manual_seed(step))
    plain = torch.ones(len(keys), dtype=torch.bool) if plain is None else plain
    audited = g.audit_mask(~keep & plain, plain, torch.Generator().manual_seed(100 + step))
    aud = {k: groups[k] for k, a in zip(keys, audited.tolist()) if a}
    if aud:
        b = _batch(aud, step)
        g.observe_audit(b, h)
        h.update(b)
    b = _batch({k: groups[k] for k, kp in zip(keys, keep.tolist()) if kp}, step)
    g.observe(b, h)
    h.update(b)
    return keep, m


def _prepared_history() -> PromptHistory:
    """e1: one all-correct outcome (easy run 1); e2a, e2b: two (easy run 2); h1a-h1d: one
    all-wrong (hard run 1); h2: two all-wrong (hard run 2)."""
    h = PromptHistory(size=4)
    h.update(_batch({"e1": EASY, "e2a": EASY, "e2b": EASY, "h2": HARD}, step=0))
    h.update(
        _batch({"e2a": EASY, "e2b": EASY, "h2": HARD, **{f"h1{c}": HARD for c in "abcd"}}, step=1)
    )
    return h


#: step 2's outcomes: e1 and h2 came back informative, the rest zero-variance again
STEP0 = {
    "e1": MIXED,
    "e2a": EASY,
    "e2b": EASY,
    **{f"h1{c}": HARD for c in "abcd"},
    "h2": MIXED,
    "new": MIXED,
}


def test_greso_run_threshold_per_kind_by_hand():
    g, h = _controlled(), _prepared_history()
    easy, hard, _ = g.runs(h, list(STEP0))
    assert easy.tolist() == [1, 2, 2, 0, 0, 0, 0, 0, 0]
    assert hard.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 0]
    # step 2: empty tables, both thresholds inf: nothing skipped although every seen
    # candidate is skippable at streak 1; every one of them is sampled (audit 1), "new" not
    keep, m = _step(g, h, 2, STEP0)
    assert keep.all()
    assert m[P + "greso_run_threshold_easy"] == NO_SKIP_RUN
    assert m[P + "greso_run_threshold_hard"] == NO_SKIP_RUN
    assert m[P + "greso_audit_sample_easy"] == 0.0
    assert m[P + "greso_false_skip_bound_hard"] == 1.0
    # tables, (run at the decision, informative):
    #   easy: e1 (1, T), e2a (2, F), e2b (2, F)
    #   hard: h1a-h1d (1, F) x4, h2 (2, T)
    assert g._audit_run["easy"].tolist() == [1.0, 2.0, 2.0]
    assert g._audit_informative["easy"].tolist() == [True, False, False]
    assert g._audit_run["hard"].tolist() == [1.0] * 4 + [2.0]
    assert g._audit_informative["hard"].tolist() == [False] * 4 + [True]
    # easy: t=2: n=2 k=0, P(Bin(2,.4)<=0) = .36 <= .4 passes; t=1: n=3 k=1,
    #   .216 + 3 * .4 * .36 = .648 fails -> threshold 2 (not streak 1)
    # hard: t=2: n=1 k=1, every one informative: fails; t=1: n=5 k=1,
    #   .6^5 + 5 * .4 * .6^4 = .07776 + .2592 = .33696 passes -> threshold 1
    # (one table for both kinds would give 1 to both: t=1 n=8 k=2, .3154 passes)
    assert g.run_threshold("easy") == 2.0 and g.run_threshold("hard") == 1.0
    # step 3: x_e1 has one all-correct outcome (easy run 1 < 2: kept), e2a easy run 3,
    # x_h1 hard run 1, h1a hard run 2 (>= 1: skipped)
    h.update(_batch({"x_e1": EASY, "x_h1": HARD}, step=2))
    keys = {"x_e1": EASY, "e2a": EASY, "x_h1": HARD, "h1a": HARD}
    keep, m = _step(g, h, 3, keys)
    assert keep.tolist() == [True, False, False, False]
    assert m[P + "skipped_easy"] == 1.0 and m[P + "skipped_hard"] == 2.0
    assert m[P + "greso_run_threshold_easy"] == 2.0
    assert m[P + "greso_run_threshold_hard"] == 1.0
    assert m[P + "greso_audit_sample_easy"] == 3.0
    assert m[P + "greso_audit_sample_hard"] == 5.0
    # U(0, 2) at .6: 1 - (1 - .6) ** (1 / 2) = 1 - sqrt(.4) = .36754
    assert m[P + "greso_false_skip_bound_easy"] == pytest.approx(1 - math.sqrt(0.4))
    assert m[P + "greso_false_skip_bound_hard"] == pytest.approx(false_skip_bound(1, 5, 0.6))
    assert m[P + "greso_false_skip_bound_hard"] <= 0.4
    # the same history without the control skips all four (streak 1, no exploration)
    plain = Greso(explore_prob=0.0, min_explore=0.0)
    assert plain.filter(h, list(keys), 3, None)[0].tolist() == [False, False, False, False]


def test_greso_samples_the_plain_batch_only_and_skipped_or_kept_alike():
    g, h = _controlled(), _prepared_history()
    plain = torch.tensor([True, False, True, True, True, True, True, False, True])
    _step(g, h, 2, STEP0, plain=plain)
    # e2a (not in the plain batch) and h2 (idem) are not sampled
    assert g._audit_run["easy"].tolist() == [1.0, 2.0]
    assert g._audit_run["hard"].tolist() == [1.0] * 4
    assert g._sampled == {} and g._round is None  # nothing pending after the step


def test_greso_audit_share_is_the_one_asked_for():
    # 2000 easy prompts of run 1, a known threshold of 1 for easy: every one is skipped, and
    # about `audit` of them audited (sd ~ .0067 at .1)
    h = PromptHistory(size=4)
    keys = [f"p{i}" for i in range(2000)]
    h.update(_batch(dict.fromkeys(keys, EASY)))
    g = _controlled(audit=0.1)
    g._controlled["easy"] = 1.0
    keep, _ = g.filter(h, keys, 0, None)
    assert not keep.any()
    plain = torch.ones(2000, dtype=torch.bool)
    audited = g.audit_mask(~keep, plain, torch.Generator().manual_seed(0))
    assert abs(float(audited.float().mean()) - 0.1) < 0.03
    assert len(g._sampled) == int(audited.sum())  # here every sampled one is skipped too


def test_greso_control_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="max_false_skip.*audit > 0"):
        Greso.from_config({"max_false_skip": 0.1}, "actuator")
    with pytest.raises(ConfigError, match="max_false_skip"):
        Greso.from_config({"max_false_skip": 1.0, "audit": 0.1}, "actuator")
    with pytest.raises(ConfigError, match="audit"):
        Greso.from_config({"audit": 1.5}, "actuator")
    with pytest.raises(ConfigError, match="confidence"):
        Greso.from_config({"confidence": 1.0}, "actuator")
    with pytest.raises(ConfigError, match="audit_memory"):
        Greso.from_config({"audit_memory": 0}, "actuator")
    # under the probe its audits would never reach greso's control
    with pytest.raises(ConfigError, match="revisits"):
        Strategy(
            {
                "prerollout": {
                    "actuator": {
                        "name": "probe",
                        "revisits": {"name": "greso", "audit": 0.1, "max_false_skip": 0.1},
                    }
                }
            }
        )
    # audit alone (measuring, no control) is fine
    assert Greso.from_config({"audit": 0.1}, "actuator").max_false_skip is None


def test_greso_control_keeps_audit_memory_per_kind():
    g, h = _controlled(audit_memory=2), _prepared_history()
    _step(g, h, 2, STEP0)
    assert g._audit_run["easy"].tolist() == [2.0, 2.0]  # the two most recent of three
    assert g._audit_informative["hard"].tolist() == [False, True]
    # easy: t=2 n=2 k=0 passes; hard: t=2 n=1 k=1 fails, t=1 n=2 k=1 fails
    assert g.run_threshold("easy") == 2.0 and g.run_threshold("hard") == math.inf


def test_greso_control_state_round_trip():
    a, h = _controlled(), _prepared_history()
    _step(a, h, 2, STEP0)
    assert_moved(a.state_dict(), _controlled().state_dict(), "greso control")
    b = _controlled()
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    assert state_equal(a.state_dict(), b.state_dict())
    assert b.run_threshold("easy") == 2.0 and b.run_threshold("hard") == 1.0
    for kind in ("easy", "hard"):
        assert torch.equal(a._audit_run[kind], b._audit_run[kind])
        assert torch.equal(a._audit_informative[kind], b._audit_informative[kind])
    # an infinite threshold survives too (a tensor in the state)
    c = _controlled()
    c.load_state_dict(_controlled().state_dict())
    assert c.run_threshold("easy") == math.inf
    # and both go on identically: the same skips, the same tables and thresholds after
    h.update(_batch({"x_e1": EASY, "x_h1": HARD}, step=2))
    hb = PromptHistory(size=4)
    hb.load_state_dict(h.state_dict())
    keys = {"x_e1": MIXED, "e2a": EASY, "x_h1": HARD, "h1a": MIXED}
    ka, ma = _step(a, h, 3, keys)
    kb, mb = _step(b, hb, 3, keys)
    assert ka.tolist() == kb.tolist() and ma == mb
    assert state_equal(a.state_dict(), b.state_dict())


# ---------------------------------------------------------------- off: today's greso
def _multi_step_record(cls, **params) -> dict:
    """A 12-step run of a greso class on 40 prompts of graded difficulty (solve rate i / 39;
    groups of 4, rewards drawn from a seeded generator; the generated groups observed and
    recorded): per step the skipped count, and a digest of every keep mask, every metric and
    the final state."""
    g = cls(**params)
    h = PromptHistory(size=4)
    keys = [f"q{i}" for i in range(40)]
    solve = torch.arange(40, dtype=torch.float64) / 39
    draw = torch.Generator().manual_seed(1234)
    record, skipped = [], []
    for step in range(12):
        keep, m = g.filter(h, keys, step, torch.Generator().manual_seed(step))
        skipped.append(int((~keep).sum()))
        rewards = (torch.rand(40, 4, generator=draw, dtype=torch.float64) < solve[:, None]).to(
            torch.float64
        )
        lengths = torch.randint(1, 9, (40, 4), generator=draw)
        rs, gids, ks, ls = [], [], [], []
        for j in keep.nonzero().squeeze(1).tolist():
            rs += rewards[j].tolist()
            gids += [len(gids) // 4] * 4
            ks += [keys[j]] * 4
            ls += lengths[j].tolist()
        b = from_lists(rs, gids, ls, prompt_keys=tuple(ks), step=step)
        g.observe(b, h)
        h.update(b)
        record.append((keep.tolist(), sorted(m.items())))
    state = g.state_dict()
    record.append(sorted(state["p"].items()))
    digest = hashlib.sha256(repr((record, sorted(state))).encode()).hexdigest()
    return {"skipped": skipped, "p": state["p"], "state": state, "digest": digest}


#: `_multi_step_record(Greso)` of the greso class before the control existed (commit cfafa0b:
#: `git show cfafa0b:src/dataflex_rl/prerollout/greso.py`, its registration line removed,
#: loaded as a module and run through this function)
OLD_SKIPPED = [0, 6, 15, 12, 12, 14, 14, 17, 17, 16, 16, 16]
OLD_P = {"easy": 0.48, "hard": 0.45999999999999996}
OLD_DIGEST = "44c38bab3527fc3782cc4af2f450aa58799db9b59217e78d29dccf89b2c91120"


@pytest.mark.parametrize("params", [{}, {"audit": 0.0, "max_false_skip": None}])
def test_greso_without_the_control_is_todays_greso(params):
    rec = _multi_step_record(Greso, **params)
    assert rec["skipped"] == OLD_SKIPPED
    assert rec["p"] == OLD_P
    assert set(rec["state"]) == {"p"}
    assert rec["digest"] == OLD_DIGEST


def test_greso_control_takes_the_first_group_of_a_prompt_generated_twice():
    g, h = _controlled(), _prepared_history()
    keep, _ = g.filter(h, ["e2a"], 2, None)
    g.audit_mask(~keep, torch.ones(1, dtype=torch.bool), None)
    assert g._sampled == {"e2a": ("easy", 2)}
    # e2a twice in the batch (two groups): all-correct first, informative second
    b = from_lists([1.0, 1.0, 1.0, 0.0], [0, 0, 1, 1], None, prompt_keys=("e2a",) * 4, step=2)
    g.observe(b, h)  # raised KeyError before: the second group popped e2a again
    assert g._audit_run["easy"].tolist() == [2.0]
    assert g._audit_informative["easy"].tolist() == [False]
