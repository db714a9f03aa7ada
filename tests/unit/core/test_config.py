"""The one config dialect (core/config.py): every error class, overrides, CLI ranges, and a
property test over every registered component's declared parameters."""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.config import (
    Checked,
    apply_overrides,
    check,
    field_rows,
    key_path,
    number_type,
    param,
    parse_scalar,
    range_text,
    validate,
    with_overrides,
)
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import parse_strategy
from dataflex_rl.describe import REGISTRIES
from dataflex_rl.hosts.engine.config import EngineConfig, OptimConfig, load_config


@dataclasses.dataclass
class Inner(Checked):
    alpha: float = param(0.5, "a probability", ge=0.0, le=1.0)
    count: int = param(1, "a count", gt=0)
    mode: str = param("fast", "a mode", choices=("fast", "slow"))
    flag: bool = param(False, "a flag")


@dataclasses.dataclass
class Mid(Checked):
    inner: Inner = param(Inner(), "third level")
    weights: list[float] | dict[str, float] | None = param(None, "weights", ge=0.0)


@dataclasses.dataclass
class Outer(Checked):
    name: str = param(doc="required")
    mid: Mid = param(Mid(), "second level")
    free: dict | None = param(None, "free-form mapping")


def _err(data: dict) -> str:
    with pytest.raises(ConfigError) as e:
        validate(Outer, data, "cfg")
    return str(e.value)


# ------------------------------------------------------------------------------ error classes
def test_unknown_key_at_depth_three_names_the_path_and_suggests():
    msg = _err({"name": "x", "mid": {"inner": {"alpah": 0.1}}})
    assert msg == (
        "cfg.mid.inner.alpah: unknown key. Did you mean 'alpha'? "
        "Valid keys: alpha, count, mode, flag"
    )


def test_unknown_component_parameter_inside_a_strategy_suggests():
    with pytest.raises(ConfigError) as e:
        parse_strategy({"reweight": {"preset": "per", "actuator": {"alpah": 1.0}}})
    assert str(e.value).startswith(
        "strategy.reweight.actuator.alpah: unknown parameter of "
        "reweighter Priority. Did you mean 'alpha'? Valid: alpha, eps"
    )


def test_wrong_type_names_expected_and_given():
    assert (
        _err({"name": "x", "mid": {"inner": {"count": "3"}}})
        == "cfg.mid.inner.count: expected int, got str ('3')"
    )
    assert _err({"name": 3}) == "cfg.name: expected str, got int (3)"
    assert _err({"name": "x", "mid": 5}) == "cfg.mid: expected a mapping, got int (5)"


def test_bool_is_not_a_number_and_a_number_is_not_a_bool():
    assert (
        _err({"name": "x", "mid": {"inner": {"count": True}}})
        == "cfg.mid.inner.count: expected int, got bool (True)"
    )
    assert (
        _err({"name": "x", "mid": {"inner": {"alpha": False}}})
        == "cfg.mid.inner.alpha: expected float, got bool (False)"
    )
    assert (
        _err({"name": "x", "mid": {"inner": {"flag": 1}}})
        == "cfg.mid.inner.flag: expected bool, got int (1)"
    )


def test_an_int_is_a_float_and_is_stored_as_given():
    out = validate(Outer, {"name": "x", "mid": {"inner": {"alpha": 1}}}, "cfg")
    assert out.mid.inner.alpha == 1 and type(out.mid.inner.alpha) is int
    assert isinstance(out.mid, Mid) and out.mid.weights is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused(bad):
    assert (
        _err({"name": "x", "mid": {"inner": {"alpha": bad}}})
        == f"cfg.mid.inner.alpha: must be a finite number, got {bad!r}"
    )


def test_out_of_range_names_the_bound():
    assert (
        _err({"name": "x", "mid": {"inner": {"alpha": 1.5}}})
        == "cfg.mid.inner.alpha: must be <= 1.0, got 1.5"
    )
    assert (
        _err({"name": "x", "mid": {"inner": {"count": 0}}})
        == "cfg.mid.inner.count: must be > 0, got 0"
    )
    with pytest.raises(ConfigError, match=r"^config\.optim\.lr: must be >= 0\.0, got -5$"):
        load_config({"optim": {"lr": -5}})


def test_choices_suggest_the_closest():
    assert (
        _err({"name": "x", "mid": {"inner": {"mode": "fats"}}})
        == "cfg.mid.inner.mode: must be one of 'fast', 'slow', got 'fats'. Did you mean 'fast'?"
    )


def test_bounds_apply_to_every_number_of_a_list_or_mapping():
    assert (
        _err({"name": "x", "mid": {"weights": [0.5, -1]}})
        == "cfg.mid.weights[1]: must be >= 0.0, got -1"
    )
    assert (
        _err({"name": "x", "mid": {"weights": {"a": -2.0}}})
        == "cfg.mid.weights.a: must be >= 0.0, got -2.0"
    )
    # a union with no fitting member names the whole declared type
    assert (
        _err({"name": "x", "mid": {"weights": "abc"}})
        == "cfg.mid.weights: expected list[float] | dict[str, float] | null, got str ('abc')"
    )
    # the member that fits further is the one reported
    assert (
        _err({"name": "x", "mid": {"weights": [0.5, "a"]}})
        == "cfg.mid.weights[1]: expected float, got str ('a')"
    )


@dataclasses.dataclass
class Seeds(Checked):
    seeds: int | list[int] = param(doc="a count or a list", ge=0)
    scale: float | None = param(None, "a bounded optional float", gt=0.0)


def test_constrained_union_members_name_the_key_and_the_value_given():
    # pydantic tags a bounded member `constrained-int` in the error location: the message
    # names the key and the value given, not the tag and None
    def err(data):
        with pytest.raises(ConfigError) as e:
            validate(Seeds, data, "cfg")
        return str(e.value)

    assert err({"seeds": "abc"}) == "cfg.seeds: expected int | list[int], got str ('abc')"
    assert err({"seeds": -1}) == "cfg.seeds: must be >= 0, got -1"
    assert err({"seeds": [1, -2]}) == "cfg.seeds[1]: must be >= 0, got -2"
    assert err({"seeds": [1, "x"]}) == "cfg.seeds[1]: expected int, got str ('x')"
    assert err({"seeds": 1, "scale": 0}) == "cfg.scale: must be > 0.0, got 0"
    assert err({"seeds": 1, "scale": "s"}) == "cfg.scale: expected float | null, got str ('s')"


def test_missing_required_key():
    assert _err({}) == "cfg: missing required key 'name'"


def test_free_form_mappings_take_any_key():
    out = validate(Outer, {"name": "x", "free": {"anything": [1, "b"]}}, "cfg")
    assert out.free == {"anything": [1, "b"]}


def test_direct_construction_is_checked_too():
    with pytest.raises(ConfigError, match=r"^OptimConfig\.lr: must be >= 0\.0, got -5$"):
        OptimConfig(lr=-5)
    with pytest.raises(ConfigError, match=r"^EngineConfig\.steps: must be >= 0, got -1$"):
        EngineConfig(steps=-1)


def test_cross_field_checks_are_rerooted_at_the_key_path():
    with pytest.raises(ConfigError, match=r"^config\.optim\.betas: needs two values"):
        load_config({"optim": {"betas": [0.9]}})
    with pytest.raises(ConfigError, match=r"^strategy\.select\.actuator\.low: must be <= high"):
        parse_strategy({"select": {"preset": "difffilter", "actuator": {"low": 0.9}}})


def test_spec_option_alias_is_suggested():
    with pytest.raises(
        ConfigError,
        match=r"strategy\.mix\.updte_every: unknown key\. Did you "
        r"mean .*'update_every'",
    ):
        parse_strategy({"mix": {"preset": "dump_ucb", "updte_every": 3}})


# ------------------------------------------------------------------------------ docs
def test_field_rows_flatten_nested_sections_with_ranges():
    rows = {r["name"]: r for r in field_rows(Outer)}
    assert set(rows) == {
        "name",
        "mid.inner.alpha",
        "mid.inner.count",
        "mid.inner.mode",
        "mid.inner.flag",
        "mid.weights",
        "free",
    }
    assert rows["mid.inner.alpha"]["range"] == "[0, 1]"
    assert rows["mid.inner.count"]["range"] == "(0, inf)"
    assert rows["mid.inner.mode"]["range"] == "one of 'fast', 'slow'"
    assert rows["mid.inner.flag"]["range"] == "true/false"
    assert rows["mid.weights"]["range"] == "[0, inf)"


# ------------------------------------------------------------------------------ overrides
def test_parse_scalar_reads_yaml_and_exponent_floats():
    assert parse_scalar("3e-4") == 3e-4 and parse_scalar("-2E3") == -2000.0
    assert parse_scalar("7") == 7 and parse_scalar("true") is True
    assert parse_scalar("null") is None and parse_scalar("[a, b]") == ["a", "b"]
    assert parse_scalar("maxvar") == "maxvar"


def test_overrides_set_nested_keys_before_validation():
    data = apply_overrides(
        {"optim": {"lr": 0.1}},
        ["optim.lr=3e-4", "grpo.group_size=4", "strategy.select.preset=maxvar"],
        EngineConfig,
    )
    assert data == {
        "optim": {"lr": 3e-4},
        "grpo": {"group_size": 4},
        "strategy": {"select": {"preset": "maxvar"}},
    }
    cfg = load_config({"optim": {"lr": 0.1}}, dotted=["optim.lr=3e-4", "tasks.domains=[math]"])
    assert cfg.optim.lr == 3e-4 and cfg.tasks.domains == ["math"]


def test_override_of_an_unknown_path_names_it_and_suggests():
    with pytest.raises(ConfigError) as e:
        apply_overrides({}, ["optim.lrr=1"], EngineConfig)
    assert str(e.value).startswith(
        "override optim.lrr=1: unknown key 'lrr' of optim. Did you mean 'lr'?"
    )
    with pytest.raises(
        ConfigError,
        match="override optm.lr=1: unknown key 'optm' of the config. Did you mean 'optim'",
    ):
        apply_overrides({}, ["optm.lr=1"], EngineConfig)


def test_override_values_are_validated_like_the_file():
    # a bad value is blamed on the override that set it, not on the file
    with pytest.raises(ConfigError, match=r"^override optim\.lr=-1: must be >= 0\.0, got -1$"):
        load_config({}, dotted=["optim.lr=-1"])
    with pytest.raises(ConfigError, match=r"^override steps=many: expected int, got str"):
        load_config({}, dotted=["steps=1", "steps=many"])


def test_a_file_name_and_the_key_path_read_apart():
    assert _err_at("runs/cfg.yaml", {"name": "x", "mid": {"inner": {"alpha": 2}}}) == (
        "runs/cfg.yaml: mid.inner.alpha: must be <= 1.0, got 2"
    )
    assert _err_at("cfg.yml", {"name": "x", "mid": {"weights": [1, -1]}}) == (
        "cfg.yml: mid.weights[1]: must be >= 0.0, got -1"
    )
    assert _err_at("cfg.yaml", {}) == "cfg.yaml: missing required key 'name'"
    assert key_path("engine", "optim") == "engine.optim" and key_path("s", 2) == "s[2]"
    assert key_path("e.yaml", "engine") == "e.yaml: engine"
    assert key_path(key_path("e.yaml", "engine"), "lr") == "e.yaml: engine.lr"
    with pytest.raises(ConfigError, match=r"^e\.yaml: optim\.betas: needs two values"):
        validate(EngineConfig, {"optim": {"betas": [0.9]}}, "e.yaml")


def _err_at(where: str, data: dict) -> str:
    with pytest.raises(ConfigError) as e:
        validate(Outer, data, where)
    return str(e.value)


def _build_outer(data: dict, applied: list[str]) -> Outer:
    return validate(Outer, data, "cfg.yaml")


def test_overrides_are_named_for_their_own_problems_and_the_file_for_its():
    good = {"name": "x"}
    with pytest.raises(ConfigError) as e:
        with_overrides(
            good, ["mid.inner.count=2", "mid.inner.alpha=abc"], Outer, "cfg.yaml", _build_outer
        )
    assert str(e.value) == "override mid.inner.alpha=abc: expected float, got str ('abc')"
    # an override that puts a wrong mapping in: the key path below it is named
    with pytest.raises(ConfigError) as e:
        with_overrides(good, ["mid={inner: {mode: fats}}"], Outer, "cfg.yaml", _build_outer)
    assert str(e.value).startswith(
        "override mid={inner: {mode: fats}}: mid.inner.mode: must be one of 'fast', 'slow'"
    )
    # the file's own problem stays the file's, overrides or not
    bad = {"name": "x", "mid": {"inner": {"count": 0}}}
    with pytest.raises(ConfigError) as e:
        with_overrides(bad, ["mid.inner.alpha=0.5"], Outer, "cfg.yaml", _build_outer)
    assert str(e.value) == "cfg.yaml: mid.inner.count: must be > 0, got 0"
    # an override that repairs the file is fine; the value set is the one built
    out = with_overrides(bad, ["mid.inner.count=3"], Outer, "cfg.yaml", _build_outer)
    assert out.mid.inner.count == 3
    # a cross-field check an override breaks names the override
    with pytest.raises(
        ConfigError, match=r"^override optim\.betas=\[0\.9\]: needs two values, got \[0\.9\]$"
    ):
        load_config({}, dotted=["optim.lr=0.1", "optim.betas=[0.9]"])


def test_malformed_overrides_are_refused():
    for bad in ("optim.lr", "=3", "optim..lr=1"):
        with pytest.raises(ConfigError, match="an override is KEY=VALUE"):
            apply_overrides({}, [bad], EngineConfig)
    with pytest.raises(ConfigError, match="strategy is 'baseline', not a mapping"):
        apply_overrides({"strategy": "baseline"}, ["strategy.select.preset=maxvar"], EngineConfig)


# ------------------------------------------------------------------------------ command line
def test_number_type_refuses_out_of_range_naming_the_option(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--alpha", type=number_type(float, gt=0.0, lt=1.0))
    parser.add_argument("--n", type=number_type(int, ge=1))
    assert parser.parse_args(["--alpha", "0.5", "--n", "3"]).n == 3
    for argv, msg in (
        (["--alpha", "1.5"], "argument --alpha: must be < 1.0, got 1.5"),
        (["--alpha", "nan"], "argument --alpha: must be a finite number"),
        (["--n", "0"], "argument --n: must be >= 1, got 0"),
        (["--n", "2.5"], "argument --n: expected an integer, got '2.5'"),
    ):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(argv)
        assert e.value.code == 2
        assert msg in capsys.readouterr().err
    assert number_type(float, gt=0.0, lt=1.0).range == "(0, 1)"


# ------------------------------------------------------------------------------ every component
COMPONENTS = sorted((kind, name) for kind, reg in REGISTRIES.items() for name in reg.names())


def _numeric_fields(cls: type) -> list[tuple[str, type, dict]]:
    hints = typing.get_type_hints(cls)
    return [
        (f.name, hints[f.name], dict(f.metadata))
        for f in dataclasses.fields(cls)
        if hints[f.name] in (int, float)
    ]


@pytest.mark.parametrize("kind, name", COMPONENTS, ids=[f"{k}:{n}" for k, n in COMPONENTS])
def test_every_parameter_declares_a_range_and_a_doc(kind, name):
    cls = REGISTRIES[kind].get(name)
    for row in cls.parameters():
        assert row["doc"], f"{name}.{row['name']} has no doc"
        assert row["range"] != "any", f"{name}.{row['name']} declares no range"
    for field_name, tp, meta in _numeric_fields(cls):
        if tp is int:  # every integer parameter is bounded below (counts, windows, salts)
            assert meta.get("ge") is not None or meta.get("gt") is not None, field_name


def _just_outside(bound: float, tp: type, below: bool) -> float:
    if tp is int:
        return bound - 1 if below else bound + 1
    return math.nextafter(bound, -math.inf if below else math.inf)


@pytest.mark.parametrize("kind, name", COMPONENTS, ids=[f"{k}:{n}" for k, n in COMPONENTS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_values_inside_the_declared_range_are_accepted_and_outside_refused(kind, name, data):
    cls = REGISTRIES[kind].get(name)
    for field_name, tp, meta in _numeric_fields(cls):
        lo = meta.get("ge") if meta.get("ge") is not None else meta.get("gt")
        hi = meta.get("le") if meta.get("le") is not None else meta.get("lt")
        if tp is int:
            inside = data.draw(
                st.integers(
                    min_value=None if lo is None else int(lo) + (meta.get("gt") is not None),
                    max_value=None if hi is None else int(hi) - (meta.get("lt") is not None),
                )
            )
        else:
            inside = data.draw(
                st.floats(
                    min_value=lo,
                    max_value=hi,
                    allow_nan=False,
                    allow_infinity=False,
                    exclude_min=meta.get("gt") is not None,
                    exclude_max=meta.get("lt") is not None,
                )
            )
        accepted = [inside]
        refused = [math.nan, math.inf] if tp is float else [True]
        bounds = (
            (meta.get("ge"), True, True),
            (meta.get("gt"), False, True),
            (meta.get("le"), True, False),
            (meta.get("lt"), False, False),
        )
        for bound, inclusive, below in bounds:
            if bound is None:
                continue
            (accepted if inclusive else refused).append(tp(bound))
            refused.append(_just_outside(bound, tp, below))
        for value in accepted:
            _accepts(cls, field_name, value)
        for value in refused:
            with pytest.raises(ConfigError, match=rf"^x\.{field_name}: "):
                cls.from_config({field_name: value}, "x")


def _accepts(cls: type, field_name: str, value: float) -> None:
    """The declared range accepts ``value`` (cross-field rules, e.g. band low <= high, are
    checked on construction with the other parameters; they are not ranges)."""
    check(cls, {field_name: value}, "x")


def test_range_text_of_unbounded_numbers():
    assert range_text({}, float) == "finite" and range_text({}, int) == "any integer"
    assert range_text({}, bool) == "true/false" and range_text({}, str) == "any"


def test_signature_schema_checks_keyword_arguments_like_a_config():
    from dataflex_rl.core.config import signature_schema

    def build(level: int | None = None, *, name: str = "a", scale: float = 1.0) -> None:
        """A user constructor."""

    schema = signature_schema(build)
    check(schema, {"level": 2, "scale": 3}, "x")
    with pytest.raises(
        ConfigError,
        match=r"^x\.sacle: unknown key\. Did you mean 'scale'\? "
        r"Valid keys: level, name, scale$",
    ):
        check(schema, {"sacle": 1.0}, "x")
    with pytest.raises(ConfigError, match=r"^x\.level: expected int \| null, got bool"):
        check(schema, {"level": True}, "x")
