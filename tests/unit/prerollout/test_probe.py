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
from dataflex_rl.prerollout.probe import ProbeSkip
from tests.states import assert_moved, state_equal


def _batch(groups, step=0):
    """``groups``: {prompt_key: [rewards]} -> one group per prompt, in order."""
    rewards, gids, keys = [], [], []
    for g, (key, rs) in enumerate(groups.items()):
        rewards += rs
        gids += [g] * len(rs)
        keys += [key] * len(rs)
    return from_lists(rewards, gids, None, prompt_keys=tuple(keys), step=step)


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
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    assert ProbeSkip(audit=0.0).audit_mask(skip, g) is None
    assert torch.equal(g.get_state(), before)  # no randomness drawn
    assert ProbeSkip(audit=1.0).audit_mask(skip, g).tolist() == skip.tolist()
    u = torch.rand(4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = ProbeSkip(audit=0.5).audit_mask(skip, torch.Generator().manual_seed(3))
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
