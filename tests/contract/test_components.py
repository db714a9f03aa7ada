"""Contract of every registered component and every preset (timm-style).

A component registered anywhere in the package is tested here the moment it is registered:
builds from defaults, output shapes and dtypes, masks and padding respected, determinism,
state round trip, pickling, and ``describe`` listing every parameter.
"""

import dataclasses
import math
import pickle

import pytest
import torch

from dataflex_rl import Strategy
from dataflex_rl.core.base import (
    REGISTRIES,
    Curriculum,
    DomainScorer,
    Mixer,
    Reweighter,
    Scorer,
    Selector,
    SkipPolicy,
)
from dataflex_rl.core.batch import informative_mask, token_mask
from dataflex_rl.core.component import Component
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.describe import describe
from dataflex_rl.presets import PRESETS
from tests.hand_worked import check_component, check_hand_worked
from tests.states import assert_moved, state_equal
from tests.strategies import DOMAINS, random_batch

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")

ALL = [(kind, name) for kind, reg in REGISTRIES.items() for name in reg.names()]
IDS = [f"{kind.replace(' ', '_')}-{name}" for kind, name in ALL]
SEEDS = (0, 1, 2)


def _cls(kind, name):
    return REGISTRIES[kind].get(name)


def _scorer_for(cls):
    """The default scorer of an actuator (or None)."""
    if getattr(cls, "default_scorer", None) and getattr(cls, "needs_signal", True):
        return REGISTRIES["scorer"].get(cls.default_scorer)()
    return None


def _scores(scorer, batch):
    s = scorer.score(batch)
    return s[batch.group_ids] if scorer.granularity == "group" else s


def _feed(scorer, seeds=SEEDS):
    for seed in seeds:
        scorer.observe(random_batch(seed, step=seed))


def _exercise(kind, comp, seed):
    """Run the component once on a seeded batch; return its outputs (tensors)."""
    b = random_batch(seed, step=seed)
    if kind == "scorer":
        if isinstance(comp, DomainScorer):
            comp.observe(b)
            return comp.values(b.num_domains)
        return (comp.score(b),)
    if kind == "selector":
        return (comp.select(_scores(_scorer_for(type(comp)), b), b),)
    if kind == "reweighter":
        norm = b.active_mask & informative_mask(b)
        return (comp.raw_weights(_scores(_scorer_for(type(comp)), b), b, norm),)
    if kind == "mixer":
        D = b.num_domains
        prior = torch.full((D,), 1.0 / D, dtype=torch.float64)
        sc = _scorer_for(type(comp))
        values = observed = None
        if sc is not None:
            _feed(sc, (seed, seed + 1, seed + 2))
            values, observed = sc.values(D)
        drawn = torch.bincount(b.domain_ids[b.active_mask], minlength=D)
        return (comp.raw_proportions(values, observed, drawn, prior),)
    history = PromptHistory()
    if kind == "curriculum":  # the batch's prompts, seen, and one never seen
        history.update(b)
        o = history.outcomes(list(b.prompt_keys) + ["unseen"])
        rate = comp.pass_rate(o)
        return rate, comp.log_weights(rate, b.step), torch.tensor([comp.target_at(b.step)])
    history.update(b)
    keys = list(b.prompt_keys) + ["unseen"]
    features = None
    if comp.feature_layer is not None:  # the representation a host would give: per key
        features = torch.tensor(
            [[float(len(str(k))), float(sum(map(ord, str(k))) % 5)] for k in keys]
        )
    keep, metrics = comp.filter(
        history, keys, b.step, torch.Generator().manual_seed(seed), features=features
    )
    comp.observe(b, history)
    return (keep, torch.tensor(list(metrics.values()), dtype=torch.float64))


# ---------------------------------------------------------------- every component
@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_builds_from_defaults_and_checks_its_base(kind, name):
    cls = _cls(kind, name)
    base = {
        "scorer": Scorer,
        "selector": Selector,
        "reweighter": Reweighter,
        "mixer": Mixer,
        "skip policy": SkipPolicy,
        "curriculum": Curriculum,
    }[kind]
    assert issubclass(cls, base) and issubclass(cls, Component)
    comp = cls()
    assert dataclasses.is_dataclass(comp)
    assert cls.from_config({}, "x") == comp
    assert cls.summary(), f"{name} needs a docstring"


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_unknown_parameter_is_an_error(kind, name):
    from dataflex_rl.core.registry import ConfigError

    with pytest.raises(ConfigError, match=r"^x\.no_such_param: unknown parameter"):
        _cls(kind, name).from_config({"no_such_param": 1}, "x")


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_output_shapes_dtypes_and_masks(kind, name):
    check_component(kind, name)  # an identity component has the right shapes too
    cls = _cls(kind, name)
    for seed in SEEDS:
        b = random_batch(seed, step=seed)
        B, T, G, D = b.batch_size, b.response_mask.shape[1], b.num_groups, b.num_domains
        out = _exercise(kind, cls(), seed)
        if kind == "scorer":
            if issubclass(cls, DomainScorer):
                values, observed = out
                assert values.shape == (D,) and values.is_floating_point()
                assert observed.shape == (D,) and observed.dtype == torch.bool
                assert torch.isfinite(values).all()
                continue
            (s,) = out
            shape = {"token": (B, T), "response": (B,), "group": (G,)}[cls.granularity]
            assert s.shape == shape and s.is_floating_point()
            assert torch.isfinite(s).all(), "scores must be finite (garbage on masked tokens)"
            if cls.granularity == "token":
                assert (s[~token_mask(b)] == 0).all()
        elif kind == "selector":
            (keep,) = out
            assert keep.shape == ((B, T) if cls.level == "token" else (B,))
            assert keep.dtype == torch.bool
        elif kind == "reweighter":
            (raw,) = out
            norm = b.active_mask & informative_mask(b)
            assert raw.shape == ((B, T) if cls.level == "token" else (B,))
            sel = raw[norm]
            assert torch.isfinite(sel).all() and (sel >= 0).all()
        elif kind == "mixer":
            (p,) = out
            assert p.shape == (D,) and torch.isfinite(p).all() and (p >= 0).all()
            assert float(p.sum()) == pytest.approx(1.0)
        elif kind == "curriculum":
            rate, lw, _ = out
            N = len(b.prompt_keys) + 1
            assert rate.shape == (N,) and rate.dtype == torch.float64
            assert ((rate >= 0) & (rate <= 1)).all()
            assert lw.shape == (N,) and torch.isfinite(lw).all()
        else:
            keep, metrics = out
            assert keep.shape == (len(b.prompt_keys) + 1,) and keep.dtype == torch.bool
            assert bool(keep[-1]), "a never-seen prompt is always generated"
            assert torch.isfinite(metrics).all()


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_deterministic(kind, name):
    check_component(kind, name)
    cls = _cls(kind, name)
    for seed in SEEDS:
        a, b = _exercise(kind, cls(), seed), _exercise(kind, cls(), seed)
        assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_state_round_trip(kind, name):
    cls = _cls(kind, name)
    a = cls()
    _exercise(kind, a, 0)
    if isinstance(a, DomainScorer):
        _feed(a)
    state = a.state_dict()
    if state:  # a stateful component: its state moved before the round trip proves anything
        assert_moved(state, cls().state_dict(), name)
    b = cls()
    b.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert state_equal(b.state_dict(), state)
    # and both behave the same from here on
    for seed in (5, 6):
        assert all(
            torch.equal(x, y) for x, y in zip(_exercise(kind, a, seed), _exercise(kind, b, seed))
        )


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_stateless_components_refuse_state(kind, name):
    comp = _cls(kind, name)()
    if comp.state_dict():
        return
    comp.load_state_dict({})
    with pytest.raises(ValueError, match="stateless"):
        comp.load_state_dict({"x": 1})


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_pickles(kind, name):
    check_component(kind, name)
    cls = _cls(kind, name)
    a = cls()
    _exercise(kind, a, 1)
    b = pickle.loads(pickle.dumps(a))
    assert b == a and state_equal(b.state_dict(), a.state_dict())


@pytest.mark.parametrize("kind, name", ALL, ids=IDS)
def test_describe_lists_every_parameter(kind, name):
    cls = _cls(kind, name)
    text = describe(name)
    section = text.split(f"## {kind} `{name}`", 1)
    assert len(section) == 2, f"no {kind} section for {name}"
    body = section[1].split("\n## ", 1)[0]
    params = {p["name"]: p for p in cls.parameters()}
    assert set(params) == {f.name for f in dataclasses.fields(cls)}
    for field_name, p in params.items():
        # a '|' inside a table cell is escaped (union types such as 'str | dict')
        cell_type = p["type"].replace("|", "\\|")
        assert f"| `{field_name}` | {cell_type} | {p['default']!r} |" in body, field_name
        assert p["doc"], f"{name}.{field_name} needs a doc line"
    if cls.paper:
        assert cls.paper in body


# ---------------------------------------------------------------- every preset
PRESET_NAMES = list(PRESETS)


def _decisions(s, seeds=SEEDS):
    out = []
    for step, seed in enumerate(seeds):
        d = s.decide(random_batch(seed, step=step))
        out.append(d)
    return out


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_preset_builds_and_decides_within_contract(preset):
    check_hand_worked(preset)
    s = Strategy(preset, domains=DOMAINS)
    for step, seed in enumerate(SEEDS):
        b = random_batch(seed, step=step)
        d = s.decide(b)
        B, T = b.response_mask.shape
        assert d.keep_mask.shape == (B,) and d.keep_mask.dtype == torch.bool
        assert d.loss_mask.shape == (B, T) and d.loss_mask.dtype == torch.bool
        assert d.weights_per_token.shape == (B, T) and d.weights_per_token.dtype == torch.float32
        assert not (d.keep_mask & ~b.active_mask).any(), "padding/invalid rows never kept"
        kept_rows = token_mask(b) & d.keep_mask[:, None]
        if d.token_keep_mask is None:
            assert torch.equal(d.loss_mask, kept_rows)
        else:  # a token-level selector: a kept row keeps some of its valid tokens
            assert torch.equal(d.loss_mask, kept_rows & d.token_keep_mask)
            assert torch.equal(d.keep_mask, d.loss_mask.any(1))
        w = d.weights_per_token
        assert torch.isfinite(w).all() and (w >= 0).all()
        assert (w[~d.loss_mask] == 0).all()
        if d.advantages is not None:
            assert d.advantages.shape == (B, T) and torch.isfinite(d.advantages).all()
        if d.proportions is not None:
            assert d.proportions.shape == (len(DOMAINS),)
        assert all(isinstance(v, float) and math.isfinite(v) for v in d.metrics.values())
        assert all(k.startswith("dataflex/") for k in d.metrics)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_preset_is_deterministic_and_pickles(preset):
    check_hand_worked(preset)
    a, b = Strategy(preset, domains=DOMAINS), Strategy(preset, domains=DOMAINS)
    for da, db in zip(_decisions(a), _decisions(b)):
        assert torch.equal(da.keep_mask, db.keep_mask)
        assert torch.equal(da.weights_per_token, db.weights_per_token)
    c = pickle.loads(pickle.dumps(a))
    for da, dc in zip(_decisions(a, (7, 8)), _decisions(c, (7, 8))):
        assert torch.equal(da.weights_per_token, dc.weights_per_token)
        assert (da.proportions is None) == (dc.proportions is None)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_preset_state_round_trip(preset):
    a = Strategy(preset, domains=DOMAINS)
    _decisions(a)
    b = Strategy(preset, domains=DOMAINS)
    if {"mix", "prerollout", "curriculum"} & set(a.parts):  # stateful: the state moved
        assert_moved(a.state_dict(), b.state_dict(), preset)
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    for da, db in zip(_decisions(a, (3, 4, 5, 6, 7, 8)), _decisions(b, (3, 4, 5, 6, 7, 8))):
        assert torch.equal(da.weights_per_token, db.weights_per_token)
    pa, pb = a.proportions, b.proportions
    assert (pa is None and pb is None) or torch.equal(pa, pb)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_preset_describe(preset):
    text = describe(preset)
    assert f"## preset `{preset}`" in text and PRESETS[preset].paper in text
