"""Strict strategy specs: every error names the key path."""

import pytest
import yaml

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import ComponentRef, StrategySpec, load_yaml, parse_strategy
from dataflex_rl.presets import PRESETS


# ---------------------------------------------------------------- what parses
def test_preset_name_expands_to_a_full_spec():
    spec = parse_strategy("difffilter")
    assert spec.name == "difffilter" and spec.reweight is None and spec.mix is None
    sel = spec.select
    assert sel.scorer == ComponentRef("solve_rate", {"threshold": 0.5})
    assert sel.actuator == ComponentRef("band", {"low": 0.2, "high": 0.8, "inclusive": False})
    assert sel.warmup_steps == 0 and sel.every == 1
    assert sel.options["recompute_advantages"] is None


def test_none_and_baseline_have_no_mechanism():
    assert parse_strategy(None).mechanisms() == {}
    assert parse_strategy("baseline").mechanisms() == {}


def test_preset_override_merges_params_key_by_key():
    spec = parse_strategy(
        {"select": {"preset": "difffilter", "actuator": {"low": 0.1}, "warmup_steps": 3}}
    )
    assert spec.select.actuator == ComponentRef(
        "band", {"low": 0.1, "high": 0.8, "inclusive": False}
    )
    assert spec.select.warmup_steps == 3
    assert spec.name == "custom"


def test_new_actuator_name_replaces_the_preset_one():
    spec = parse_strategy(
        {"select": {"preset": "topk", "actuator": {"name": "band"}, "scorer": "solve_rate"}}
    )
    assert spec.select.actuator == ComponentRef("band", {})


def test_default_scorer_is_used_when_none_given():
    from dataflex_rl.core.spec import resolve_mechanism

    spec = parse_strategy({"select": {"actuator": "max_variance"}})
    scorer, _ = resolve_mechanism(spec.select, "x")
    assert type(scorer).__name__ == "Reward"


def test_update_every_is_an_alias_of_every_for_mix():
    spec = parse_strategy({"mix": {"preset": "dump_ucb", "update_every": 7}})
    assert spec.mix.every == 7
    with pytest.raises(ConfigError, match="either 'update_every' or 'every'"):
        parse_strategy({"mix": {"preset": "dump_ucb", "update_every": 7, "every": 2}})


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_round_trips_through_to_dict(name):
    spec = parse_strategy(name)
    again = parse_strategy(spec.to_dict())
    assert again == spec
    assert yaml.safe_load(yaml.safe_dump(spec.to_dict())) == spec.to_dict()  # YAML-able


def test_yaml_file_with_overrides(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: mine\n# comment\n"
        "select: {preset: maxvar, actuator: {keep_fraction: 0.25}}\n"
        "mix: {preset: tscl, update_every: 2}\n"
    )
    spec = parse_strategy(p)
    assert isinstance(spec, StrategySpec) and parse_strategy(str(p)) == spec
    assert spec.name == "mine"
    assert spec.select.actuator.params == {"keep_fraction": 0.25}
    assert spec.mix.every == 2 and spec.mix.warmup_steps == 5


def test_missing_and_malformed_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("select: {preset: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        parse_strategy(bad)


# ---------------------------------------------------------------- errors name the key path
@pytest.mark.parametrize(
    "value, key_path, extra",
    [
        # unknown keys
        ({"selct": "difffilter"}, "strategy.selct: unknown key", "Did you mean 'select'?"),
        (
            {"select": {"preset": "difffilter", "warmup": 3}},
            "strategy.select.warmup: unknown key",
            "Did you mean 'warmup_steps'?",
        ),
        (
            {"select": {"preset": "difffilter", "actuator": {"lowx": 0.1}}},
            "strategy.select.actuator.lowx: unknown parameter",
            "Did you mean 'low'?",
        ),
        (
            {"select": {"preset": "difffilter", "scorer": {"treshold": 0.1}}},
            "strategy.select.scorer.treshold: unknown parameter",
            "Did you mean 'threshold'?",
        ),
        (
            {"mix": {"preset": "reward_gap", "prior": [1, 1], "update_evry": 2}},
            "strategy.mix.update_evry: unknown key",
            "Did you mean 'update_every'?",
        ),
        # unknown names
        ({"select": "difffiltr"}, "strategy.select", "Did you mean 'difffilter'?"),
        ({"select": {"actuator": "bandd"}}, "unknown selector 'bandd'", "Did you mean 'band'?"),
        (
            {"select": {"actuator": "band", "scorer": "solve_rat"}},
            "unknown scorer 'solve_rat'",
            "Did you mean 'solve_rate'?",
        ),
        ({"select": "softmax"}, "strategy.select", "preset 'softmax' has no select section"),
        # wrong types
        (
            {"select": {"preset": "difffilter", "warmup_steps": "3"}},
            "strategy.select.warmup_steps: expected int",
            "str",
        ),
        (
            {"select": {"preset": "difffilter", "every": 2.0}},
            "strategy.select.every: expected int",
            "float",
        ),
        (
            {"select": {"preset": "difffilter", "warmup_steps": True}},
            "strategy.select.warmup_steps: expected int",
            "bool",
        ),
        (
            {"select": {"preset": "difffilter", "actuator": {"inclusive": "yes"}}},
            "strategy.select.actuator.inclusive: expected bool",
            "str",
        ),
        (
            {"select": {"preset": "difffilter", "actuator": {"low": None}}},
            "strategy.select.actuator.low: expected float",
            "NoneType",
        ),
        (
            {"select": {"preset": "maxvar", "recompute_advantages": "no"}},
            "strategy.select.recompute_advantages: expected bool | null",
            "",
        ),
        (
            {"reweight": {"preset": "softmax", "normalize": "all"}},
            "strategy.reweight.normalize: must be one of 'informative', 'active'",
            "",
        ),
        ({"mix": {"preset": "static", "prior": "uniform"}}, "strategy.mix.prior: expected", ""),
        ({"name": 3}, "strategy.name: expected str", ""),
        ({"select": 3}, "strategy.select: expected a preset name or a mapping", ""),
        (
            {"select": {"actuator": {"low": 0.1}}},
            "strategy.select.actuator: a component mapping needs a 'name'",
            "",
        ),
        ([1, 2], "strategy: expected a preset name", ""),
        # out of range
        (
            {"select": {"preset": "difffilter", "every": 0}},
            "strategy.select.every: must be >= 1",
            "",
        ),
        (
            {"select": {"preset": "difffilter", "warmup_steps": -1}},
            "strategy.select.warmup_steps: must be >= 0",
            "",
        ),
        (
            {"select": {"preset": "maxvar", "actuator": {"keep_fraction": 1.5}}},
            "strategy.select.actuator.keep_fraction: must be <= 1.0",
            "",
        ),
        (
            {"select": {"preset": "maxvar", "actuator": {"keep_fraction": 0.0}}},
            "strategy.select.actuator.keep_fraction: must be > 0.0",
            "",
        ),
        (
            {"reweight": {"preset": "softmax", "actuator": {"temperature": float("nan")}}},
            "strategy.reweight.actuator.temperature: must be a finite number",
            "",
        ),
        (
            {"reweight": {"preset": "ar", "actuator": {"alpha": 1.5}}},
            "strategy.reweight.actuator.alpha: must be <= 1.0",
            "",
        ),
        (
            {"mix": {"preset": "dump_ucb", "scorer": {"window": 0}}},
            "strategy.mix.scorer.window: must be >= 1",
            "",
        ),
        (
            {"mix": {"preset": "dump_ucb", "actuator": {"floor": 1.0}}},
            "strategy.mix.actuator.floor: must be < 1.0",
            "",
        ),
        (
            {"mix": {"preset": "static", "prior": [1.0, -1.0]}},
            "strategy.mix.prior[1]: must be >= 0.0",
            "",
        ),
        (
            {"prerollout": {"actuator": "greso", "history_size": 0}},
            "strategy.prerollout.history_size: must be >= 1",
            "",
        ),
        # cross-field checks name the component's key path too
        (
            {"select": {"preset": "difffilter", "actuator": {"low": 0.9}}},
            "strategy.select.actuator.low: must be <= high",
            "",
        ),
        (
            {"reweight": {"preset": "diffband", "actuator": {"low": 0.9, "high": 0.1}}},
            "strategy.reweight.actuator.low: must be <= high",
            "",
        ),
        # structure
        ({"select": {"warmup_steps": 2}}, "strategy.select: needs an 'actuator'", "difffilter"),
        (
            {"mix": {"actuator": "static", "scorer": "domain_reward"}},
            "strategy.mix.scorer: 'static' takes no scorer",
            "",
        ),
    ],
)
def test_errors_name_the_key(value, key_path, extra):
    with pytest.raises(ConfigError) as e:
        parse_strategy(value)
    msg = str(e.value)
    assert key_path in msg, msg
    assert extra in msg, msg


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError) as e:
        parse_strategy("maxvarr")
    msg = str(e.value)
    assert "unknown strategy preset 'maxvarr'" in msg and "Did you mean 'maxvar'" in msg
    assert all(name in msg for name in PRESETS)


def test_unknown_actuator_lists_valid_names():
    with pytest.raises(ConfigError) as e:
        parse_strategy({"reweight": {"actuator": "nope", "scorer": "reward"}})
    assert "ar, band_weight, maxrl, per, softmax" in str(e.value)


def test_errors_inside_a_yaml_file_name_the_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("select: {preset: difffilter, every: 0}\n")
    with pytest.raises(ConfigError, match=rf"^{p}: select\.every: must be >= 1"):
        parse_strategy(p)


def test_spec_is_not_aliased_to_the_presets():
    spec = parse_strategy("difffilter")
    spec.select.actuator.params["low"] = 0.5  # mutate the parsed copy
    assert PRESETS["difffilter"].spec["select"]["actuator"]["low"] == 0.2
    assert parse_strategy("difffilter").select.actuator.params["low"] == 0.2
