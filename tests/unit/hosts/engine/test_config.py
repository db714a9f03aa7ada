"""Engine config: strict loading, overrides, path resolution, and every shipped engine YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataflex_rl.core.config import field_rows
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.engine.config import EngineConfig, load_config

ROOT = Path(__file__).resolve().parents[4]
ENGINE_YAMLS = sorted(
    [*(ROOT / "examples").glob("*.yaml"), *(ROOT / "configs" / "engine").glob("*.yaml")]
)


def field_docs(cls: type = EngineConfig, prefix: str = "") -> list[tuple[str, str, object]]:
    """(dotted key, doc, default) for every leaf field."""
    return [(r["name"], r["doc"], r["default"]) for r in field_rows(cls, prefix)]


def test_defaults():
    cfg = load_config()
    assert isinstance(cfg, EngineConfig)
    assert cfg.policy == "tiny" and cfg.grpo.group_size == 8 and cfg.strategies == []


def test_overrides_and_none_overrides_are_ignored():
    cfg = load_config({"steps": 5}, steps=9, seed=None)
    assert cfg.steps == 9 and cfg.seed == 0


def test_nested_unknown_key_names_the_path_and_suggests():
    with pytest.raises(
        ConfigError,
        match=r"config\.optim\.learning_rate: unknown key.*"
        r"Valid keys: lr, ",
    ):
        load_config({"optim": {"learning_rate": 1e-3}})


def test_bools_are_not_numbers():
    with pytest.raises(ConfigError, match="steps: expected int"):
        load_config({"steps": True})


def test_relative_strategy_paths_resolve_against_the_yaml(tmp_path):
    (tmp_path / "s.yaml").write_text("name: s\nselect: difffilter\n")
    (tmp_path / "c.yaml").write_text("strategy: s.yaml\nstrategies: [s.yaml, baseline]\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.strategy == str(tmp_path / "s.yaml")
    assert cfg.strategies == [str(tmp_path / "s.yaml"), "baseline"]


def test_top_level_must_be_a_mapping(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(p)


def test_every_field_has_a_doc():
    docs = field_docs()
    assert {k for k, _, _ in docs} >= {"grpo.group_size", "optim.lr", "eval.every"}
    assert all(doc for _, doc, _ in docs)


def test_there_are_engine_yamls():
    assert ENGINE_YAMLS


@pytest.mark.parametrize("path", ENGINE_YAMLS, ids=lambda p: p.name)
def test_shipped_engine_yaml_loads_and_its_strategies_build(path):
    cfg = load_config(path)
    for spec in cfg.strategies or [cfg.strategy]:
        Strategy(spec, domains=cfg.tasks.domains)


def test_default_yaml_lists_exactly_the_defaults():
    # configs/engine/default.yaml documents every setting; it must stay equal to the code
    assert load_config(ROOT / "configs" / "engine" / "default.yaml") == EngineConfig()
    text = (ROOT / "configs" / "engine" / "default.yaml").read_text()
    for key, _, _ in field_docs():
        assert f"{key.split('.')[-1]}:" in text, key


def test_tasks_warm_size_is_validated_and_reaches_the_task_set():
    from dataflex_rl.hosts.engine.data import tasks_from_config

    assert load_config().tasks.warm_size == 0
    with pytest.raises(ConfigError, match=r"tasks\.warm_size"):
        load_config({"tasks": {"warm_size": -1}})
    cfg = load_config(
        {
            "tasks": {
                "domains": ["logic"],
                "train_size": 30,
                "eval_size": 5,
                "warm_size": 12,
                "difficulty": {"logic": 3},
            }
        }
    )
    ts = tasks_from_config(cfg)
    assert [len(ts.eval["logic"]), len(ts.train["logic"]), len(ts.warm["logic"])] == [5, 30, 12]


def test_group_size_below_two_is_refused():
    # the engine's groups then always have a baseline: core's group_advantages gives a
    # one-response group 0, a rule the engine never meets (hosts/engine/trainer.py, _batch)
    assert load_config({"grpo": {"group_size": 2}}).grpo.group_size == 2
    with pytest.raises(ConfigError, match="grpo.group_size"):
        load_config({"grpo": {"group_size": 1}})


@pytest.mark.parametrize("source", [{"native": False}, "override"])
def test_native_is_an_unknown_key(source):
    # the switch of the compiled C kernels for 'ar' (gone before the first release)
    if source == "override":
        with pytest.raises(ConfigError, match=r"override native=false: unknown key 'native'"):
            load_config(dotted=["native=false"])
        return
    with pytest.raises(ConfigError, match=r"^config\.native: unknown key\. Valid keys: policy"):
        load_config(source)


QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def test_a_strategy_override_runs_just_that_strategy():
    # examples/quickstart.yaml runs strategies [baseline, difffilter] side by side; the
    # override `strategy=maxvar` (train --help's example) must run maxvar, not be ignored
    assert load_config(QUICKSTART).strategies == ["baseline", "difffilter"]
    cfg = load_config(QUICKSTART, dotted=["strategy=maxvar"])
    assert cfg.strategy == "maxvar" and cfg.strategies == []
    cfg = load_config(QUICKSTART, dotted=["strategy.select.preset=maxvar"])
    assert cfg.strategy == {"select": {"preset": "maxvar"}} and cfg.strategies == []
    assert load_config(QUICKSTART, strategy="gfpo").strategies == []
    # strategies overridden too: that list runs; both non-empty is ambiguous
    cfg = load_config(QUICKSTART, dotted=["strategies=[maxvar, baseline]"])
    assert cfg.strategies == ["maxvar", "baseline"]
    with pytest.raises(ConfigError, match=r"both strategy \('maxvar'\) and strategies"):
        load_config(QUICKSTART, dotted=["strategy=maxvar", "strategies=[gfpo]"])
    assert load_config(QUICKSTART, dotted=["strategy=maxvar", "strategies=[]"]).strategies == []


def test_unknown_strategy_presets_are_refused_at_load_with_the_valid_names():
    for dotted, key in [
        (["strategy=maxvr"], "strategy"),
        (["strategy.select.preset=maxvr"], "strategy.select"),
        (["strategies=[baseline, maxvr]"], r"strategies\[1\]"),
    ]:
        with pytest.raises(ConfigError, match=rf"{key}.*'maxvr'.*Did you mean 'maxvar'") as e:
            load_config(QUICKSTART, dotted=dotted)
        assert "maxvar" in str(e.value) and "difffilter" in str(e.value)
    with pytest.raises(ConfigError, match=r"strategy: unknown strategy preset 'nope'"):
        load_config({"strategy": "nope"})


def test_proportions_of_unknown_domains_are_refused_at_validation():
    with pytest.raises(
        ConfigError,
        match=r"^config\.tasks\.proportions: unknown domain 'mth'\. Did you mean 'math'\? "
        r"Domains: math, logic, science$",
    ):
        load_config({"tasks": {"proportions": {"math": 0.25, "mth": 0.5}}})
    with pytest.raises(ConfigError, match=r"tasks\.proportions: needs 2 values"):
        load_config({"tasks": {"domains": ["math", "logic"], "proportions": [1, 2, 3]}})
    with pytest.raises(ConfigError, match=r"tasks\.proportions: .*positive sum"):
        load_config({"tasks": {"proportions": {"math": 0}}})
    cfg = load_config(QUICKSTART, dotted=["tasks.proportions.math=0.5"])
    assert cfg.tasks.proportions == {"math": 0.5, "logic": 0.5, "science": 0.25}
