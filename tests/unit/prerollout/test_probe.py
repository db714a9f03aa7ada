"""The ``probe`` skip policy: a logistic probe on prompt representations (hand-worked)."""

import math
import pickle

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.prerollout.probe import ProbeSkip, controlled_threshold, false_skip_bound
from tests.states import assert_moved, state_equal
from tests.unit.prerollout.groups import group_batch as _batch


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


X = torch.tensor([[1.0], [3.0]])  # one feature: "a" = 1, "b" = 3
A_ZERO = {"a": [0.0, 0.0], "b": [1.0, 0.0]}  # "a" all wrong (zero variance), "b" informative


def test_probe_update_by_hand():
    # features 1 and 3: running mean 2, variance 1 -> scaled -1 and +1; labels 1 and 0.
    # step 1 from w = b = 0: p = (.5, .5), g = p - y = (-.5, .5),
    #   dw = (-1 * -.5 + 1 * .5) / 2 + l2 * 0 = .5 -> w = -.5;  db = mean(g) = 0
    # step 2: p = (sig(.5), sig(-.5)), g = (sig(.5) - 1, sig(-.5)) = (-.3775, .3775),
    #   dw = .3775 + .1 * -.5 = .3275 -> w = -.8275
    p = ProbeSkip(iterations=2, lr=1.0, l2=0.1, min_observed=1, revisits=None)
    p.learn(X, torch.tensor([True, False]))
    w2 = -0.5 - ((1.0 - _sig(0.5)) + 0.1 * -0.5)
    assert p._w.tolist() == pytest.approx([w2], abs=1e-7)
    assert float(p._b) == pytest.approx(0.0, abs=1e-12)
    pred = p.predict(torch.tensor([[1.0], [3.0], [2.0]]))
    assert pred.tolist() == pytest.approx([_sig(-w2), _sig(w2), 0.5], abs=1e-7)


def test_probe_running_statistics_do_not_depend_on_how_outcomes_arrive():
    one, two = ProbeSkip(revisits=None), ProbeSkip(revisits=None)
    x = torch.tensor([[1.0, 5.0], [3.0, -1.0], [0.5, 2.0]])
    z = torch.tensor([True, False, True])
    one.learn(x, z, fit=False)
    two.learn(x[:1], z[:1], fit=False)
    two.learn(x[1:], z[1:], fit=False)
    torch.testing.assert_close(one._mean, x.double().mean(0))
    torch.testing.assert_close(two._mean, x.double().mean(0))
    var = x.double().var(0, unbiased=False)
    torch.testing.assert_close(one._m2 / 3, var)
    torch.testing.assert_close(two._m2 / 3, var)


def test_probe_skips_first_visits_predicted_zero_variance_once_ready():
    s = Strategy(
        {
            "prerollout": {
                "actuator": {
                    "name": "probe",
                    "min_observed": 2,
                    "iterations": 1,
                    "lr": 1.0,
                    "l2": 0.0,
                    "threshold": 0.6,
                    "max_false_skip": None,
                    "revisits": None,
                }
            }
        }
    )
    keep, m = s.filter_prompts(["a", "b"], 0, torch.Generator(), X)
    assert keep.tolist() == [True, True] and m["dataflex/prerollout/probe_ready"] == 0.0
    s.decide(_batch(A_ZERO))  # learns: w = -.5 (as by hand above, one step)
    # new prompts with the same representations: sig(.5) = .62 >= .6 skipped, sig(-.5) kept
    keep, m = s.filter_prompts(["c", "d"], 1, torch.Generator(), X)
    assert keep.tolist() == [False, True]
    assert m["dataflex/prerollout/skipped_probe"] == 1.0
    assert m["dataflex/prerollout/predicted_zero_variance"] == pytest.approx(0.5)


def test_probe_leaves_revisits_to_greso():
    s = Strategy(
        {
            "prerollout": {
                "actuator": {
                    "name": "probe",
                    "min_observed": 1,
                    "iterations": 1,
                    "lr": 1.0,
                    "l2": 0.0,
                    "threshold": 0.99,
                    "audit": 0.0,
                    "max_false_skip": None,
                    "revisits": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0},
                }
            }
        }
    )
    s.filter_prompts(["a", "b"], 0, torch.Generator(), X)
    s.decide(_batch(A_ZERO))
    # "a" came back all wrong: greso skips it (p = 0); the probe (threshold .99) skips nothing
    keep, m = s.filter_prompts(
        ["a", "b", "e"], 1, torch.Generator(), torch.tensor([[1.0], [3.0], [1.0]])
    )
    assert keep.tolist() == [False, True, True]
    assert m["dataflex/prerollout/skipped_probe"] == 0.0
    assert m["dataflex/prerollout/skipped_hard"] == 1.0


def test_probe_audit_draws_only_when_asked():
    skip = torch.tensor([True, False, True, True])
    plain = torch.ones(4, dtype=torch.bool)
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    assert ProbeSkip(audit=0.0, max_false_skip=None).audit_mask(skip, plain, g) is None
    assert torch.equal(g.get_state(), before)  # no randomness drawn
    assert ProbeSkip(audit=1.0).audit_mask(skip, plain, g).tolist() == skip.tolist()
    u = torch.rand(4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = ProbeSkip(audit=0.5).audit_mask(skip, plain, torch.Generator().manual_seed(3))
    assert got.tolist() == (skip & (u < 0.5)).tolist()


def test_probe_learns_from_audited_outcomes():
    s = Strategy({"prerollout": {"actuator": {"name": "probe", "revisits": None}}})
    s.filter_prompts(["a", "b"], 0, torch.Generator(), X)
    m = s.observe_audit(_batch(A_ZERO))
    assert m == {
        "dataflex/prerollout/audit_groups": 2.0,
        "dataflex/prerollout/audit_informative": 1.0,
    }
    probe = s.parts["prerollout"][1]
    assert probe._y.tolist() == [1.0, 0.0] and probe._observed == 2
    assert s.history.get("a")[0][2] is True  # the history records audited outcomes


def test_probe_needs_features_and_a_host_that_gives_them():
    with pytest.raises(ValueError, match="needs features"):
        ProbeSkip().filter(PromptHistory(), ["a"], 0, None)
    with pytest.raises(ConfigError, match="revisits"):
        ProbeSkip(revisits="probe")
    with pytest.raises(ConfigError, match="max_false_skip.*audit > 0"):
        ProbeSkip(audit=0.0)  # the control would never see an outcome
    with pytest.raises(ConfigError, match="max_false_skip"):
        ProbeSkip.from_config({"max_false_skip": 1.5}, "probe")
    from dataflex_rl.hosts.common.driver import Driver
    from dataflex_rl.hosts.common.intake import Intake

    s = Strategy({"prerollout": {"actuator": "probe"}})
    intake = Intake.from_rows(["math", "logic"], ["math", "logic"])  # verl/TRL: no features
    with pytest.raises(ConfigError, match="prompt representation.*trl host"):
        Driver(s, intake, host="trl")


def test_verl_refuses_the_probe_before_anything_is_built():
    from dataflex_rl.hosts.common.config import HostConfig, HostSettings, check_block

    block = HostConfig(strategy={"prerollout": {"actuator": "probe"}})
    with pytest.raises(ConfigError, match=r"PPOTrainerSync\._next_train_batch"):
        check_block(block, HostSettings("verl", "grpo", True, ()))
    check_block(block, HostSettings("trl", "grpo", True, ()))  # TRL computes it
    greso = HostConfig(strategy={"prerollout": {"actuator": "greso"}})
    check_block(greso, HostSettings("verl", "grpo", True, ()))


def test_probe_state_round_trip():
    spec = {"prerollout": {"actuator": {"name": "probe", "min_observed": 2, "iterations": 3}}}
    a, fresh = Strategy(spec), Strategy(spec)
    x = torch.tensor([[1.0, 0.0], [3.0, 1.0], [2.0, 2.0]])
    a.filter_prompts(["a", "b", "c"], 0, torch.Generator(), x)
    a.decide(_batch({"a": [0.0, 0.0], "b": [1.0, 0.0], "c": [1.0, 1.0]}))
    assert_moved(a.state_dict(), fresh.state_dict(), "probe")
    b = Strategy(spec)
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    assert state_equal(a.state_dict(), b.state_dict())
    y = torch.tensor([[1.5, 0.5], [2.5, 0.5]])
    for st in (a, b):
        st.filter_prompts(["d", "e"], 1, torch.Generator().manual_seed(0), y)
        st.decide(_batch({"d": [0.0, 0.0], "e": [1.0, 0.0]}, step=1))
    pa, pb = a.parts["prerollout"][1], b.parts["prerollout"][1]
    assert torch.equal(pa._w, pb._w) and torch.equal(pa.predict(y), pb.predict(y))


# ---------------------------------------------------------------------- false-skip control
def test_controlled_threshold_by_hand():
    # target .5, confidence .7: a threshold passes when P(Binomial(n, .5) <= k) <= .3.
    # sorted by prediction:  q   .9  .8  .7  .6  .5  .4
    #                 informative 0   0   0   1   0   1
    # n=1 k=0: .5 fail;  n=2 k=0: .25 pass;  n=3 k=0: .125 pass;  n=4 k=1: 5/16 = .3125 fail;
    # n=5 k=1: 6/32 = .1875 pass;  n=6 k=2: 22/64 = .34 fail  -> the lowest passing: .5
    # (a walk from the top stopping at the first failure would stop at .7)
    q = torch.tensor([0.6, 0.9, 0.4, 0.8, 0.5, 0.7], dtype=torch.float64)
    informative = torch.tensor([True, False, True, False, False, False])
    assert controlled_threshold(q, informative, 0.5, 0.7) == 0.5
    # the bound above .5 (5 entries, 1 informative) is the Clopper-Pearson one, the p with
    # P(Binomial(5, p) <= 1) = (1 - p)^5 + 5 p (1 - p)^4 = .3: p = .4220
    u = false_skip_bound(1, 5, 0.7)
    assert (1 - u) ** 5 + 5 * u * (1 - u) ** 4 == pytest.approx(0.3, abs=1e-9)
    assert u == pytest.approx(0.4220, abs=1e-4)
    assert false_skip_bound(1, 5, 0.7) <= 0.5 < false_skip_bound(2, 6, 0.7)
    # ties stay together: with .8 and .7 equal, n=2 is no threshold (n=3 k=0 still passes)
    tied = torch.tensor([0.6, 0.9, 0.4, 0.7, 0.5, 0.7], dtype=torch.float64)
    assert controlled_threshold(tied, informative, 0.5, 0.7) == 0.5
    # one more false skip at the top: n=2 k=1 .75, n=3 k=1 .5, n=5 k=2 .5 -> n=6 k=3 .66:
    # nothing passes, skip nothing
    worse = informative.clone()
    worse[1] = True
    assert controlled_threshold(q, worse, 0.5, 0.7) == math.inf
    # at the defaults (.10, .95) 28 clean entries are not enough, 29 are: .9^29 = .047
    clean = torch.linspace(0.99, 0.5, 29, dtype=torch.float64)
    none = torch.zeros(29, dtype=torch.bool)
    assert controlled_threshold(clean[:28], none[:28], 0.1, 0.95) == math.inf
    assert controlled_threshold(clean, none, 0.1, 0.95) == float(clean[-1])
    assert controlled_threshold(clean[:0], none[:0], 0.1, 0.95) == math.inf


def test_controlled_threshold_tests_the_bound_at_the_floor_it_will_use():
    # target .2, confidence .6: pass when .8^n <= .4 (k = 0): n = 4 gives .4096 (fail),
    # n = 5 gives .328 (pass). Four clean entries at .18 and one at .0005: the lowest passing
    # threshold is .0005 (n = 5); under a floor of .01 the skipped set would be the top four
    # alone, whose bound (1 - .4^(1/4) = .2047) is over the target -- so nothing passes.
    q = torch.tensor([0.18, 0.18, 0.18, 0.18, 0.0005], dtype=torch.float64)
    none = torch.zeros(5, dtype=torch.bool)
    assert controlled_threshold(q, none, 0.2, 0.6) == 0.0005
    assert false_skip_bound(0, 4, 0.6) == pytest.approx(1 - 0.4**0.25, abs=1e-12)
    assert false_skip_bound(0, 4, 0.6) > 0.2 >= false_skip_bound(0, 5, 0.6)
    assert controlled_threshold(q, none, 0.2, 0.6, floor=0.01) == math.inf
    # a floor at or below a passing prediction keeps it
    assert controlled_threshold(q, none, 0.2, 0.6, floor=0.0005) == 0.0005
    six = torch.cat([q, torch.tensor([0.18], dtype=torch.float64)])  # .8^5 at the top: pass
    assert controlled_threshold(six, torch.zeros(6, dtype=torch.bool), 0.2, 0.6, 0.01) == 0.18


def _controlled(**kw):
    spec = {
        "name": "probe",
        "min_observed": 2,
        "iterations": 1,
        "lr": 1.0,
        "l2": 0.0,
        "threshold": 0.05,
        "audit": 1.0,
        "max_false_skip": 0.5,
        "confidence": 0.7,
        "revisits": None,
        **kw,
    }
    return Strategy({"prerollout": {"actuator": spec}})


def _step(s, step, groups, x, plain=None):
    """One draw (filter + audit) and the step's outcomes (audited ones first, then the rest).
    Returns the keep mask and the filter's metrics."""
    keys = list(groups)
    g = torch.Generator().manual_seed(step)
    keep, m = s.filter_prompts(keys, step, g, x)
    plain = torch.ones(len(keys), dtype=torch.bool) if plain is None else plain
    audited = s.audit_prompts(~keep & plain, plain, g)
    aud = {k: groups[k] for k, a in zip(keys, audited.tolist()) if a}
    if aud:
        s.observe_audit(_batch(aud, step))
    s.decide(_batch({k: groups[k] for k, kp in zip(keys, keep.tolist()) if kp}, step))
    return keep, m


def test_probe_threshold_follows_the_audited_outcomes_by_hand():
    s = _controlled()
    probe = s.parts["prerollout"][1]
    # step 0: not ready, nothing sampled (the sample holds the ready probe's decisions)
    _step(s, 0, A_ZERO, X)
    assert probe._audit_q.numel() == 0 and probe.skip_threshold == math.inf
    # step 1: ready, controlled threshold inf: skips nothing, but every plain candidate is
    # sampled (audit 1): "c" (like "a": predicted sig(.5) = .62) came back all wrong,
    # "d" (sig(-.5) = .38) informative
    keep, m = _step(s, 1, {"c": [0.0, 0.0], "d": [1.0, 0.0]}, X)
    assert keep.tolist() == [True, True] and m["dataflex/prerollout/probe_threshold"] == 1.0
    assert m["dataflex/prerollout/probe_false_skip_bound"] == 1.0
    assert probe._audit_q.tolist() == pytest.approx([_sig(0.5), _sig(-0.5)])
    assert probe._audit_informative.tolist() == [False, True]
    # table (.62 clean, .38 informative): n=1 k=0 P = .5 > .3 -> still no threshold
    assert probe.skip_threshold == math.inf
    # step 2: two more clean ones; the probe's predictions have moved, so read them back
    x2 = torch.tensor([[0.5], [1.0]])
    q2 = probe.predict(x2).tolist()
    _step(s, 2, {"e": [1.0, 1.0], "f": [0.0, 0.0]}, x2)
    assert probe._audit_q.tolist() == pytest.approx([_sig(0.5), _sig(-0.5), *q2])
    assert probe._audit_informative.tolist() == [False, True, False, False]  # e, f: all equal
    assert min(q2) > _sig(-0.5)  # the three clean ones on top, the informative one last:
    # n=3 k=0: .125 passes; n=4 k=1: .3125 fails -> the lowest clean prediction
    tau = min(q2 + [_sig(0.5)])
    assert probe.skip_threshold == pytest.approx(tau)
    # step 3: a candidate at or above it is skipped (and audited: audit 1), one below kept
    q3 = probe.predict(X).tolist()
    assert q3[0] >= tau > q3[1]
    keep, m = _step(s, 3, {"g": [0.0, 0.0], "h": [1.0, 0.0]}, X)
    assert keep.tolist() == [False, True]
    assert m["dataflex/prerollout/skipped_probe"] == 1.0
    assert m["dataflex/prerollout/probe_threshold"] == pytest.approx(tau)
    assert m["dataflex/prerollout/probe_audit_sample"] == 4.0
    assert m["dataflex/prerollout/probe_false_skip_bound"] == pytest.approx(
        false_skip_bound(0, 3, 0.7)
    )


def test_probe_samples_only_the_plain_batch():
    # over-drawn candidates (outside the plain batch) are neither audited nor sampled
    s = _controlled()
    _step(s, 0, A_ZERO, X)
    _step(s, 1, {"c": [0.0, 0.0], "d": [1.0, 0.0]}, X, plain=torch.tensor([True, False]))
    assert s.parts["prerollout"][1]._audit_q.tolist() == pytest.approx([_sig(0.5)])


def test_probe_control_state_round_trip():
    a, fresh = _controlled(), _controlled()
    x2 = torch.tensor([[0.5], [1.0]])
    for step, groups, x in (
        (0, A_ZERO, X),
        (1, {"c": [0.0, 0.0], "d": [1.0, 0.0]}, X),
        (2, {"e": [1.0, 1.0], "f": [0.0, 0.0]}, x2),
    ):
        _step(a, step, groups, x)
    pa = a.parts["prerollout"][1]
    assert pa._audit_q.numel() == 4 and pa.skip_threshold < math.inf  # the control moved
    assert_moved(a.state_dict(), fresh.state_dict(), "probe control")
    b = _controlled()
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    assert state_equal(a.state_dict(), b.state_dict())
    pb = b.parts["prerollout"][1]
    assert pb.skip_threshold == pa.skip_threshold
    assert torch.equal(pb._audit_q, pa._audit_q)
    assert torch.equal(pb._audit_informative, pa._audit_informative)
    # and both go on identically (the same skips, the same next threshold)
    outs = [_step(st, 3, {"g": [0.0, 0.0], "h": [1.0, 0.0]}, X) for st in (a, b)]
    assert outs[0][0].tolist() == outs[1][0].tolist()
    assert pa.skip_threshold == pb.skip_threshold


def test_probe_audit_table_takes_the_first_group_of_a_prompt_generated_twice():
    p = ProbeSkip(revisits=None)
    p._sampled = {"a": 0.7}  # sampled at prediction .7 this step
    # "a" twice in the audited batch: informative first, all wrong second
    b = from_lists([1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1], None, prompt_keys=("a",) * 4)
    p.observe_audit(b, PromptHistory())  # raised KeyError before: "a" popped twice
    assert p._audit_q.tolist() == [0.7] and p._audit_informative.tolist() == [True]
