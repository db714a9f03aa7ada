"""Pre-rollout: the tensor-backed history, GRESO's runs and the per-domain take equal loops."""

from __future__ import annotations

import math

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dataflex_rl  # noqa: F401
from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.hosts.common.accounting import first_per_domain
from dataflex_rl.prerollout.greso import Greso

#: one group outcome: (prompt key, rewards of its responses, tokens per response)
GROUPS = st.lists(
    st.tuples(
        st.sampled_from("abcdefgh"),
        st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=3),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=8,
)


def _batch(groups, step):
    rewards, gids, keys, lengths = [], [], [], []
    for g, (key, rs, t) in enumerate(groups):
        rewards += rs
        gids += [g] * len(rs)
        keys += [key] * len(rs)
        lengths += [t] * len(rs)
    return from_lists(rewards, gids, lengths, prompt_keys=tuple(keys), step=step)


def _history(steps, size):
    h = PromptHistory(size)
    for step, groups in enumerate(steps):
        h.update(_batch(groups, step))
    return h


def _oracle_history(steps, size):
    """{key: [outcome, ...]} kept by a plain loop, one outcome per group in order."""
    out: dict = {}
    for step, groups in enumerate(steps):
        for key, rs, t in groups:
            solve = sum(r > 0.5 for r in rs) / len(rs)
            out.setdefault(key, []).append((step, solve, len(set(rs)) == 1, t * len(rs)))
            out[key] = out[key][-size:]
    return out


@given(st.lists(GROUPS, min_size=1, max_size=6), st.integers(1, 4))
@settings(max_examples=150)
def test_history_equals_a_plain_loop_and_round_trips(steps, size):
    h = _history(steps, size)
    oracle = _oracle_history(steps, size)
    for key in "abcdefgh":
        assert h.get(key) == oracle.get(key, [])
        want = (sum(o[3] for o in oracle[key]) / len(oracle[key])) if key in oracle else None
        assert h.mean_tokens(key) == want
    h2 = PromptHistory()
    assert len(h) == len(oracle) > 0  # the history moved: the round trip restores something
    h2.load_state_dict(h.state_dict())
    assert all(h2.get(k) == h.get(k) for k in "abcdefgh") and len(h2) == len(h)


def _oracle_run(outcomes, kind):
    run = 0
    for _, solve, zero, _ in reversed(outcomes):
        if not zero or (solve < 1.0 if kind == "easy" else solve > 0.0):
            break
        run += 1
    return run


@given(st.lists(GROUPS, min_size=1, max_size=6), st.integers(1, 4))
@settings(max_examples=150)
def test_greso_runs_equal_a_plain_loop(steps, size):
    h = _history(steps, size)
    keys = list("abcdefghz")
    easy, hard, _ = Greso().runs(h, keys)
    assert easy.tolist() == [_oracle_run(h.get(k), "easy") for k in keys]
    assert hard.tolist() == [_oracle_run(h.get(k), "hard") for k in keys]


@given(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=30),
    st.lists(st.integers(0, 6), min_size=3, max_size=3),
)
def test_first_per_domain_equals_a_loop(cands, quota):
    left = list(quota)
    want = []
    for d, ok in cands:
        take = ok and left[d] > 0
        left[d] -= int(take)
        want.append(take)
    dom = torch.tensor([d for d, _ in cands], dtype=torch.int64)
    ok = torch.tensor([o for _, o in cands], dtype=torch.bool)
    got = first_per_domain(dom, ok, torch.tensor(quota, dtype=torch.int64))
    assert got.tolist() == want


# ---------------------------------------------------------------------- the probe's control
def _oracle_threshold(q, informative, target, confidence, floor):
    """Plain loop: the lowest distinct prediction >= ``floor`` whose Clopper-Pearson bound
    (the beta quantile, not the binomial test the implementation uses) is <= target."""
    from dataflex_rl.prerollout.probe import false_skip_bound

    best, margins = math.inf, []
    for t in sorted(v for v in set(q) if v >= floor):
        n = sum(1 for v in q if v >= t)
        k = sum(1 for v, i in zip(q, informative) if v >= t and i)
        u = false_skip_bound(k, n, confidence)
        margins.append(abs(u - target))
        if u <= target and t < best:
            best = t
    return best, min(margins, default=1.0)


TABLES = st.lists(
    st.tuples(st.sampled_from([i / 20 for i in range(21)]), st.booleans()),
    max_size=80,
)


@given(
    TABLES,
    st.floats(0.05, 0.6),
    st.sampled_from([0.6, 0.8, 0.9, 0.95]),
    st.floats(0.0, 1.0),
    st.sampled_from([-math.inf, 0.0, 0.3, 0.52, 0.9]),
)
@settings(max_examples=200)
def test_controlled_threshold_equals_a_loop_and_never_passes_a_bound_over_the_target(
    table, target, confidence, clean_share, floor
):
    from dataflex_rl.prerollout.probe import controlled_threshold, false_skip_bound

    # many clean entries on top now and then, so that thresholds do pass
    table = sorted(table, key=lambda e: -e[0])
    table = [(q, i and j >= clean_share * len(table)) for j, (q, i) in enumerate(table)]
    q = [e[0] for e in table]
    inf = [e[1] for e in table]
    want, margin = _oracle_threshold(q, inf, target, confidence, floor)
    assume(margin > 1e-9)  # a bound on the target itself: either answer is right
    got = controlled_threshold(
        torch.tensor(q, dtype=torch.float64),
        torch.tensor(inf, dtype=torch.bool),
        target,
        confidence,
        floor,
    )
    assert got == want
    if got < math.inf:  # the rule skips only where the bound is within the target
        n = sum(1 for v in q if v >= got)
        k = sum(1 for v, i in zip(q, inf) if v >= got and i)
        assert false_skip_bound(k, n, confidence) <= target


@given(
    st.lists(
        st.lists(st.tuples(st.floats(-2.0, 2.0), st.booleans()), min_size=1, max_size=6),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([0.2, 0.4]),
)
@settings(max_examples=60, deadline=None)
def test_probe_never_skips_when_the_audited_bound_exceeds_the_target(steps, target):
    from dataflex_rl import Strategy
    from dataflex_rl.prerollout.probe import false_skip_bound

    conf = 0.6
    s = Strategy(
        {
            "prerollout": {
                "actuator": {
                    "name": "probe",
                    "min_observed": 1,
                    "threshold": 0.01,
                    "audit": 1.0,
                    "max_false_skip": target,
                    "confidence": conf,
                    "revisits": None,
                }
            }
        }
    )
    probe = s.parts["prerollout"][1]
    for step, cands in enumerate(steps):
        keys = [f"{step}-{j}" for j in range(len(cands))]
        x = torch.tensor([[v] for v, _ in cands])
        # the table before this draw, read from the saved state
        state = s.state_dict()["components"]["prerollout"]["actuator"]
        tq = state["audit_q"].tolist()
        ti = state["audit_informative"].tolist()
        g = torch.Generator().manual_seed(step)
        keep, m = s.filter_prompts(keys, step, g, x)
        skipped = m["dataflex/prerollout/skipped_probe"]
        thr = probe.skip_threshold
        bounds = [
            false_skip_bound(
                sum(1 for v, i in zip(tq, ti) if v >= t and i),
                sum(1 for v in tq if v >= t),
                conf,
            )
            for t in set(tq)
        ]
        if all(b > target for b in bounds):  # no threshold's bound is within the target
            assert skipped == 0 and thr == math.inf
        if skipped:
            n = sum(1 for v in tq if v >= thr)
            k = sum(1 for v, i in zip(tq, ti) if v >= thr and i)
            assert false_skip_bound(k, n, conf) <= target
        plain = torch.ones(len(keys), dtype=torch.bool)
        audited = s.audit_prompts(~keep, plain, g)
        groups = {k: [1.0, 0.0] if inf else [0.0, 0.0] for k, (_, inf) in zip(keys, cands)}
        aud = {k: groups[k] for k, a in zip(keys, audited.tolist()) if a}
        if aud:
            s.observe_audit(_batch([(k, r, 1) for k, r in aud.items()], step))
        s.decide(_batch([(k, groups[k], 1) for k, kp in zip(keys, keep.tolist()) if kp], step))


#: one candidate of a greso step: (prompt key, its group: easy, hard or informative)
GRESO_STEP = st.dictionaries(
    st.sampled_from("abcdef"), st.sampled_from(["easy", "hard", "mixed"]), min_size=1
)


@given(st.lists(GRESO_STEP, min_size=1, max_size=10), st.sampled_from([0.2, 0.4]))
@settings(max_examples=60, deadline=None)
def test_greso_never_skips_a_kind_whose_audited_bound_exceeds_the_target(steps, target):
    from dataflex_rl import Strategy
    from dataflex_rl.prerollout.probe import false_skip_bound

    conf = 0.6
    s = Strategy(
        {
            "prerollout": {
                "actuator": {
                    "name": "greso",
                    "explore_prob": 0.0,
                    "min_explore": 0.0,
                    "audit": 1.0,
                    "max_false_skip": target,
                    "confidence": conf,
                }
            }
        }
    )
    greso = s.parts["prerollout"][1]
    rewards = {"easy": [1.0, 1.0], "hard": [0.0, 0.0], "mixed": [1.0, 0.0]}
    for step, cands in enumerate(steps):
        keys = list(cands)
        easy, hard, _ = greso.runs(s.history, keys)
        # the tables before this draw, read from the saved state
        state = s.state_dict()["components"]["prerollout"]["actuator"]["control"]
        g = torch.Generator().manual_seed(step)
        keep, m = s.filter_prompts(keys, step, g)
        for kind, run in (("easy", easy), ("hard", hard)):
            tr = state[kind]["run"].tolist()
            ti = state[kind]["informative"].tolist()
            thr = greso.run_threshold(kind)
            skipped = ~keep & (run > 0)
            assert float(skipped.sum()) == m[f"dataflex/prerollout/skipped_{kind}"]
            bounds = [
                false_skip_bound(
                    sum(1 for v, i in zip(tr, ti) if v >= t and i),
                    sum(1 for v in tr if v >= t),
                    conf,
                )
                for t in set(tr)
            ]
            if all(b > target for b in bounds):  # no threshold's bound is within the target
                assert not skipped.any() and thr == math.inf
            if skipped.any():
                assert bool((run[skipped] >= thr).all())
                n = sum(1 for v in tr if v >= thr)
                k = sum(1 for v, i in zip(tr, ti) if v >= thr and i)
                assert false_skip_bound(k, n, conf) <= target
        plain = torch.ones(len(keys), dtype=torch.bool)
        audited = s.audit_prompts(~keep, plain, g)
        aud = [(k, rewards[cands[k]], 1) for k, a in zip(keys, audited.tolist()) if a]
        if aud:
            s.observe_audit(_batch(aud, step))
        s.decide(
            _batch([(k, rewards[cands[k]], 1) for k, kp in zip(keys, keep.tolist()) if kp], step)
        )
