"""The one naming rule for per-domain metric keys (`core.metrics`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.batch import from_lists, informative_mask, invalid_reward_mask
from dataflex_rl.core.metrics import (
    check_domain_names,
    domain_metric,
    metric_domain,
    split_domain_metric,
    step_metrics,
)
from dataflex_rl.core.registry import ConfigError


@pytest.mark.parametrize(
    "name, written",
    [
        ("math", "math"),
        ("openai/gsm8k", "openai_gsm8k"),
        ("a b\tc", "a_b_c"),
        ("lighteval/MATH/level 5", "lighteval_MATH_level_5"),
        ("x-y.z", "x-y.z"),
    ],
)
def test_metric_domain_replaces_slashes_and_whitespace(name, written):
    assert metric_domain(name) == written


def test_domain_metric_is_one_key_level_per_part():
    key = domain_metric("mix", "openai/gsm8k", "target")
    assert key == "dataflex/mix/domain/openai_gsm8k/target"
    assert key.split("/") == ["dataflex", "mix", "domain", "openai_gsm8k", "target"]


def test_split_domain_metric_inverts_domain_metric():
    for stage, domain, quantity in [("mix", "openai/gsm8k", "target"), ("batch", "a b", "actual")]:
        key = domain_metric(stage, domain, quantity)
        assert split_domain_metric(key, stage) == (metric_domain(domain), quantity)
        assert split_domain_metric(key, "other") is None
    for key in ("dataflex/mix/kept", "dataflex/mix/domain/math", "eval/math/greedy", ""):
        assert split_domain_metric(key, "mix") is None


def test_check_domain_names_refuses_collisions_only():
    check_domain_names(["math", "openai/gsm8k", "logic"])
    with pytest.raises(
        ConfigError,
        match=r"hosts\.domains: 'a/b' and 'a_b' are both written "
        r"'a_b'",
    ):
        check_domain_names(["a/b", "a_b"], "hosts.domains")


def test_step_metrics_per_domain_batch_share_and_signal():
    # groups 0, 1 of domain "x/y", group 2 of "z": shares 2/3 and 1/3; signal as given
    b = from_lists(
        [1.0, 0.0, 1.0, 0.0, 1.0, 1.0],
        [0, 0, 1, 1, 2, 2],
        domain_ids=torch.tensor([0, 0, 0, 0, 1, 1]),
        domains=("x/y", "z"),
        advantages=[1.0] * 6,
    )
    keep = b.active_mask
    m = step_metrics(b, keep, keep.float(), per_domain=True, signal=torch.tensor([0.3, 0.7]))
    assert m["dataflex/batch/domain/x_y/actual"] == pytest.approx(2 / 3)
    assert m["dataflex/batch/domain/z/actual"] == pytest.approx(1 / 3)
    assert m["dataflex/mix/domain/x_y/signal"] == pytest.approx(0.3)
    assert not any(k.startswith("dataflex/domain/") for k in m)


def _loop_step_metrics(b, keep, w, signal):
    """Plain loops over rows and groups: the definition of every `step_metrics` figure."""
    B, G, D = b.batch_size, b.num_groups, b.num_domains
    active = b.active_mask.tolist()
    informative = informative_mask(b).tolist()
    n_tok = b.response_length.tolist()
    gid = b.group_ids.tolist()
    keep, w = keep.tolist(), w.tolist()
    n_active = sum(active)
    n_keep = sum(keep)
    g_active = [any(active[i] for i in range(B) if gid[i] == g) for g in range(G)]
    g_kept = [any(keep[i] for i in range(B) if gid[i] == g) for g in range(G)]
    g_inf = [any(informative[i] for i in range(B) if gid[i] == g) for g in range(G)]

    def frac(a, c):
        return a / c if c > 0 else 0.0

    m = {
        "dataflex/responses": n_active,
        "dataflex/padding_responses": sum(b.is_padding.tolist()),
        "dataflex/invalid_reward_responses": sum(invalid_reward_mask(b).tolist()),
        "dataflex/invalid_responses": sum(b.invalid_mask.tolist()),
        "dataflex/kept_response_fraction": frac(n_keep, n_active),
        "dataflex/kept_group_fraction": frac(sum(g_kept), sum(g_active)),
        "dataflex/kept_token_fraction": frac(
            sum(n for n, k in zip(n_tok, keep) if k), sum(n for n, a in zip(n_tok, active) if a)
        ),
        "dataflex/all_dropped": float(n_active > 0 and n_keep == 0),
        "dataflex/zero_advantage_group_fraction": frac(
            sum(a and not i for a, i in zip(g_active, g_inf)), sum(g_active)
        ),
    }
    ws = [x for x, k, n in zip(w, keep, n_tok) if k and n > 0]
    if ws:
        mean = sum(ws) / len(ws)
        m["dataflex/weight_mean"] = mean
        m["dataflex/weight_std"] = (sum((x - mean) ** 2 for x in ws) / len(ws)) ** 0.5
        m["dataflex/weight_min"] = min(ws)
        m["dataflex/weight_max"] = max(ws)
        sq = sum(x * x for x in ws)
        ess = sum(ws) ** 2 / sq if sq > 0 else 0.0
    else:
        for k in ("mean", "std", "min", "max"):
            m[f"dataflex/weight_{k}"] = 0.0
        ess = 0.0
    m["dataflex/weight_ess"] = ess
    m["dataflex/weight_ess_fraction"] = frac(ess, len(ws))
    dom = b.domain_ids.tolist()
    first = [min(i for i in range(B) if gid[i] == g) for g in range(G)]
    per_d = [sum(1 for g in range(G) if g_active[g] and dom[first[g]] == d) for d in range(D)]
    for d, name in enumerate(b.domains):
        m[domain_metric("batch", name, "actual")] = frac(per_d[d], sum(per_d))
        if signal is not None:
            m[domain_metric("mix", name, "signal")] = float(signal[d])
    return m


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 4),  # group (made dense below)
            st.sampled_from([0.0, 1.0, 0.5, float("nan")]),  # reward
            st.integers(0, 5),  # length
            st.booleans(),  # padding
            st.booleans(),  # kept
            st.floats(0.0, 4.0),  # weight
            st.sampled_from([0.0, 1.0, -0.5, 1e-9]),  # advantage
        ),
        min_size=1,
        max_size=14,
    ),
    with_signal=st.booleans(),
)
def test_step_metrics_matches_loop(rows, with_signal):
    gid = torch.unique(torch.tensor([r[0] for r in rows]), return_inverse=True)[1]
    b = from_lists(
        [r[1] for r in rows],
        gid.tolist(),
        [r[2] for r in rows],
        advantages=[r[6] for r in rows],
        is_padding=torch.tensor([r[3] for r in rows]),
        domain_ids=gid % 2,
        domains=("a", "b/c"),
    )
    keep = torch.tensor([r[4] for r in rows]) & b.active_mask
    w = torch.tensor([r[5] for r in rows], dtype=torch.float32)
    signal = torch.tensor([0.25, 0.75]) if with_signal else None
    got = step_metrics(b, keep, w, per_domain=True, signal=signal)
    want = _loop_step_metrics(b, keep, w, signal)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k
        assert isinstance(got[k], float), k


@pytest.mark.parametrize("F, B", [(3, 50), (3, 300), (8, 200)])  # (8, 200): one scatter per flag
def test_groups_with_matches_loop(F, B):
    from dataflex_rl.core.metrics import _groups_with

    g = torch.Generator().manual_seed(F * B)
    gid = torch.randint(0, 7, (B,), generator=g)
    gid = torch.unique(gid, return_inverse=True)[1]
    G = int(gid.max()) + 1
    flags = torch.rand(F, B, generator=g) < 0.05
    want = [
        [any(bool(flags[f, i]) for i in range(B) if gid[i] == k) for k in range(G)]
        for f in range(F)
    ]
    assert _groups_with(flags, gid, G).tolist() == want
