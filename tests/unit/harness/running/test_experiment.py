"""harness/running/experiment.py: shipped experiment files load; errors name the key."""

from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.experiment import load_experiment, parse_experiment
from dataflex_rl.hosts.engine.host import EngineHost
from dataflex_rl.presets import PRESETS

#: the engine host (the engine settings of an experiment: `EngineHost.engine_config`)
ENGINE = EngineHost()
ROOT = Path(__file__).resolve().parents[4]
EXPERIMENTS = sorted((ROOT / "configs" / "experiments").glob("*.yaml"))
HOSTED = sorted((ROOT / "examples" / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", HOSTED, ids=lambda p: p.name)
def test_shipped_host_experiment_loads(path):
    exp = load_experiment(path)
    assert exp.host != "engine" and exp.baseline in exp.labels
    assert exp.domains and exp.host_impl.run_config(exp, {})


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_shipped_experiment_loads(path):
    exp = load_experiment(path)
    assert exp.baseline in exp.labels
    cfg = ENGINE.engine_config(exp)
    assert cfg.steps == exp.budget.steps
    assert cfg.grpo.group_size == exp.budget.samples_per_prompt


def test_paper13_has_the_papers_configurations():
    exp = load_experiment(ROOT / "configs" / "experiments" / "paper13.yaml")
    # the paper's 13 presets, in its order (presets beyond it are registered after them)
    assert exp.labels == list(PRESETS)[:13]
    assert len(exp.labels) == 13
    assert list(ENGINE.engine_config(exp).tasks.domains) == ["math", "logic", "science"]


def test_quick_is_two_by_two():
    exp = load_experiment(ROOT / "configs" / "experiments" / "quick.yaml")
    assert len(exp.labels) == 2 and len(exp.seeds) == 2


MINIMAL = {"name": "t", "strategies": ["baseline", "difffilter"], "seeds": 2}


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"budgte": {}}, r"experiment\.budgte: unknown key\. Did you mean 'budget'"),
        ({"budget": {"step": 3}}, r"experiment\.budget\.step: unknown key\. Did you mean 'steps'"),
        ({"budget": {"steps": -1}}, r"experiment\.budget\.steps"),
        (
            {"engine": {"steps": 3}},
            r"experiment\.engine\.steps: set by the experiment.*budget\.steps",
        ),
        ({"engine": {"grpo": {"group_size": 4}}}, r"engine\.grpo\.group_size.*samples_per_prompt"),
        ({"engine": {"eval": {"every": 4}}}, r"engine\.eval: set by the experiment.*evaluation"),
        (
            {"engine": {"optim": {"lrr": 1.0}}},
            r"engine\.optim\.lrr: unknown key\. Did you mean 'lr'",
        ),
        ({"strategies": ["baseline", "difffilte"]}, r"strategies\[1\].*Did you mean 'difffilter'"),
        ({"strategies": ["baseline", "baseline"]}, r"labels repeat: baseline"),
        ({"baseline": "basline"}, r"experiment\.baseline.*Did you mean 'baseline'"),
        ({"seeds": 0}, r"experiment\.seeds"),
        ({"seeds": [1, 1]}, r"seeds repeat"),
        ({"evaluation": {"metric": "greedyy"}}, r"evaluation\.metric: must be one of"),
        ({"evaluation": {"metric": "sampled"}}, r"evaluation\.samples: metric 'sampled' needs"),
        ({"statistics": {"alpha": 1.5}}, r"statistics\.alpha"),
        ({"host": "enigne"}, r"experiment\.host: must be one of 'engine'"),
        ({"host": 3}, r"experiment\.host"),
        (
            {"trl": {"model": "m"}},
            r"experiment\.trl: the settings of host 'trl', but the experiment's host is 'engine'",
        ),
        ({"verl": {}}, r"experiment\.verl: the settings of host 'verl'.*set host: verl"),
        ({"trl": 3}, r"experiment\.trl"),
    ],
)
def test_errors_name_the_key(patch, match):
    with pytest.raises(ConfigError, match=match):
        parse_experiment({**MINIMAL, **patch})


def test_missing_required_key():
    with pytest.raises(ConfigError, match="missing required key 'seeds'"):
        parse_experiment({"name": "t", "strategies": ["baseline"]})


def test_strategy_entries_labels_and_files(tmp_path):
    (tmp_path / "mine.yaml").write_text("name: mine\nselect: {preset: difffilter}\n")
    exp = parse_experiment(
        {
            **MINIMAL,
            "strategies": [
                "baseline",
                "mine.yaml",
                {
                    "label": "soft2",
                    "strategy": {
                        "reweight": {"preset": "softmax", "actuator": {"temperature": 2.0}}
                    },
                },
            ],
        },
        base=tmp_path,
    )
    assert exp.labels == ["baseline", "mine", "soft2"]
    soft = exp.strategies[2].to_dict()
    assert soft["name"] == "soft2" and soft["reweight"]["actuator"]["temperature"] == 2.0
    assert exp.seeds == (0, 1)


def test_engine_config_defaults_keep_workers_quiet():
    cfg = ENGINE.engine_config(parse_experiment(MINIMAL))
    assert cfg.log.progress is False and cfg.log.plots is False


def test_seeds_override_runs_seeds_0_to_n_minus_1():
    quick = ROOT / "configs" / "experiments" / "quick.yaml"
    assert load_experiment(quick).seeds == (0, 1)
    assert load_experiment(quick, ["aa"], seeds=6).seeds == tuple(range(6))
    for bad in (0, -2, True, 2.5):
        with pytest.raises(ConfigError, match="--seeds: must be an integer >= 1"):
            load_experiment(quick, seeds=bad)


def test_engine_is_the_default_host_and_unchanged():
    """host: engine (explicit or by default) is the same experiment: same run configs."""
    from dataflex_rl.harness.running.runner import plan

    default = parse_experiment(MINIMAL)
    explicit = parse_experiment({**MINIMAL, "host": "engine"})
    assert default.host == explicit.host == "engine"
    assert [r.fingerprint for r in plan(default, "o")] == [
        r.fingerprint for r in plan(explicit, "o")
    ]
    run = plan(default, "o")[0]
    assert run.python is None and run.host == "engine"
    assert run.identity["host"] == "engine"


def test_generated_tokens_budget_reaches_the_engine_and_only_the_engine():
    base = {"name": "x", "strategies": ["baseline", "difffilter"], "seeds": 2}
    exp = parse_experiment({**base, "budget": {"steps": 500, "generated_tokens": 9000}})
    cfg = ENGINE.engine_config(exp)
    assert cfg.generated_tokens == 9000 and cfg.steps == 500
    assert ENGINE.engine_config(parse_experiment(base)).generated_tokens is None
    with pytest.raises(ConfigError, match=r"budget\.generated_tokens: must be >= 1"):
        parse_experiment({**base, "budget": {"generated_tokens": 0}})
    path = next(p for p in HOSTED if load_experiment(p).host == "trl")
    import yaml

    data = yaml.safe_load(path.read_text())
    data["budget"] = {**(data.get("budget") or {}), "generated_tokens": 9000}
    with pytest.raises(ConfigError, match=r"budget\.generated_tokens: host 'trl' cannot stop") as e:
        parse_experiment(data)
    assert "no stop at a count of generated tokens" in str(e.value)  # why, on TRL
    assert "Hosts that can: engine." in str(e.value)
