"""Controls of ``compare`` (harness/running/controls.py, experiment.py, runner.py): parsing, arms,
engine overrides in the runs' identity, and the worker's engine config. Stand-in engine, no
model."""

import json
from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.runner import plan
from dataflex_rl.hosts.engine.config import EngineConfig
from dataflex_rl.hosts.engine.host import EngineHost
from tests.harness_cli import run_cli

#: the engine host (the engine settings of an experiment: `EngineHost.engine_config`)
ENGINE = EngineHost()
FAKE = "tests.unit.harness.fake_engine:run_training"
RECORD = "tests.unit.harness.running.test_control_arms:recording_train"
MINIMAL = {
    "name": "t",
    "strategies": ["baseline", "difffilter"],
    "seeds": 2,
    "engine": {"tasks": {"domains": ["math", "logic", "science"]}},
    "budget": {"steps": 2, "prompts_per_step": 4, "samples_per_prompt": 2},
    "evaluation": {"every": 1, "per_domain": 5},
    "statistics": {"n_boot": 500},
}


def recording_train(config, strategy, *, seed, out_dir, resume):
    """The stand-in engine, plus what the worker's EngineConfig says."""
    from tests.unit.harness.fake_engine import run_training

    Path(out_dir, "seen.json").write_text(
        json.dumps(
            {
                "lr": config.optim.lr,
                "sampling_stream": config.sampling_stream,
                "select": strategy.get("select"),
            }
        )
    )
    return run_training(config, strategy, seed=seed, out_dir=out_dir, resume=resume)


def exp(**patch):
    return parse_experiment({**MINIMAL, **patch})


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "value",
    [
        ["aa", "no_update", "half_lr", "drop_half"],
        ["aa", {"no_update": None}, {"half_lr": {}}, {"drop_half": {"fraction": 0.5}}],
        {"aa": {}, "no_update": None, "half_lr": {}, "drop_half": {"fraction": 0.5}},
    ],
)
def test_controls_become_labelled_arms_with_required_outcomes(value):
    e = exp(controls=value)
    assert e.labels == [
        "baseline",
        "difffilter",
        "aa_control",
        "no_update_control",
        "half_lr_control",
        "drop_half_control",
    ]
    assert e.control_outcomes == {
        "aa_control": "same",
        "no_update_control": "worse",
        "half_lr_control": "worse",
        "drop_half_control": "worse",
    }
    arms = {s.label: s for s in e.strategies}
    assert arms["aa_control"].overrides == {"sampling_stream": 1}
    assert arms["no_update_control"].overrides == {"optim": {"lr": 0.0}}
    # half the engine's default learning rate
    assert arms["half_lr_control"].overrides == {"optim": {"lr": EngineConfig().optim.lr / 2}}
    assert arms["drop_half_control"].overrides == {}
    select = arms["drop_half_control"].to_dict()["select"]
    assert select["actuator"] == {"name": "random_groups", "fraction": 0.5, "salt": 0}
    assert select["renormalize"] is False
    # every arm but drop_half is the baseline's strategy under its own label
    base = {k: v for k, v in arms["baseline"].to_dict().items() if k not in ("name", "description")}
    for label in ("aa_control", "no_update_control", "half_lr_control"):
        d = arms[label].to_dict()
        assert (
            d["name"] == label
            and {k: v for k, v in d.items() if k not in ("name", "description")} == base
        )
    assert arms["baseline"].control is None and arms["aa_control"].control == "aa"


def test_controls_follow_the_experiments_engine_and_baseline():
    e = exp(
        engine={"sampling_stream": 2, "optim": {"lr": 1e-4}},
        strategies=[{"label": "ref", "strategy": {"reweight": "softmax"}}, "difffilter"],
        baseline="ref",
        controls=["aa", "half_lr", {"drop_half": {"fraction": 0.25, "salt": 3}}],
    )
    arms = {s.label: s for s in e.strategies}
    assert arms["aa_control"].overrides == {"sampling_stream": 3}
    assert arms["half_lr_control"].overrides == {"optim": {"lr": 5e-5}}
    drop = arms["drop_half_control"].to_dict()
    assert drop["reweight"] == arms["ref"].to_dict()["reweight"]  # baseline's strategy
    assert drop["select"]["actuator"]["fraction"] == 0.25
    cfg = ENGINE.engine_config(e, arms["half_lr_control"].overrides)
    assert cfg.optim.lr == 5e-5 and cfg.sampling_stream == 2 and cfg.optim.betas == [0.9, 0.999]
    assert exp(controls=[{"aa": {"sampling_stream": 5}}]).strategies[-1].overrides == {
        "sampling_stream": 5
    }


@pytest.mark.parametrize(
    "patch, match",
    [
        (
            {"controls": ["a_a"]},
            r"experiment\.controls\[0\]: unknown control 'a_a'\. Did you mean "
            r"'aa'\?.*Controls: aa, no_update, half_lr, drop_half",
        ),
        (
            {"controls": {"drop_halve": {}}},
            r"experiment\.controls: unknown control 'drop_halve'\. "
            r"Did you mean 'drop_half'",
        ),
        (
            {"controls": [{"drop_half": {"fractoin": 0.5}}]},
            r"experiment\.controls\[0\]\.drop_half\.fractoin: unknown key\. Did you mean 'fraction'",
        ),
        (
            {"controls": [{"drop_half": {"fraction": 1.5}}]},
            r"controls\[0\]\.drop_half\.fraction: must be <= 1",
        ),
        ({"controls": [{"drop_half": {"fraction": 0}}]}, r"drop_half\.fraction: must be > 0"),
        ({"controls": [{"no_update": {"lr": 0}}]}, r"controls\[0\]\.no_update\.lr: unknown key"),
        ({"controls": [{"aa": 1}]}, r"controls\[0\]\.aa: expected a mapping of parameters"),
        (
            {"controls": [{"aa": {}, "half_lr": {}}]},
            r"controls\[0\]: a control with parameters is "
            r"a mapping with one key",
        ),
        ({"controls": "aa"}, r"experiment\.controls: expected a list of control names"),
        ({"controls": ["aa", "aa"]}, r"controls\[1\]: control 'aa' is listed twice"),
        (
            {"controls": [{"aa": {"sampling_stream": 0}}]},
            r"controls\.aa\.sampling_stream: must differ from the experiment's stream \(0\)",
        ),
        (
            {"controls": ["half_lr"], "engine": {"optim": {"lr": 0.0}}},
            r"controls\.half_lr: the experiment's learning rate is 0",
        ),
        (
            {"controls": ["drop_half"], "baseline": "difffilter"},
            r"controls\.drop_half: the baseline already has a 'select'",
        ),
        (
            {
                "controls": ["aa"],
                "strategies": ["baseline", {"label": "aa_control", "strategy": "baseline"}],
            },
            r"controls\.aa: its arm's label 'aa_control' is already a strategy label",
        ),
        ({"controlz": ["aa"]}, r"experiment\.controlz: unknown key\. Did you mean 'controls'"),
    ],
)
def test_errors_name_the_key(patch, match):
    with pytest.raises(ConfigError, match=match):
        exp(**patch)


def test_command_line_controls_add_to_the_files(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(json.dumps({**MINIMAL, "controls": ["aa"]}))  # JSON is YAML
    from dataflex_rl.harness.running.experiment import load_experiment

    e = load_experiment(path, ["no_update", "aa"])  # aa is not added twice
    assert list(e.control_outcomes) == ["aa_control", "no_update_control"]
    with pytest.raises(
        ConfigError,
        match=r"--control: unknown control 'halflr'\. Did you mean "
        r"'half_lr'",
    ):
        load_experiment(path, ["halflr"])


# ---------------------------------------------------------------- runs
def test_arms_have_their_own_config_and_fingerprint(tmp_path):
    plain = plan(exp(), tmp_path)
    runs = plan(exp(controls=["aa", "no_update", "half_lr", "drop_half"]), tmp_path)
    by = {(r.method, r.seed): r for r in runs}
    # adding controls leaves the strategies' runs as they were (their finished runs are reused)
    assert [r.fingerprint for r in plain] == [by[(r.method, r.seed)].fingerprint for r in plain]
    for seed in (0, 1):
        prints = [
            by[(m, seed)].fingerprint
            for m in (
                "baseline",
                "difffilter",
                "aa_control",
                "no_update_control",
                "half_lr_control",
                "drop_half_control",
            )
        ]
        assert len(set(prints)) == 6
    base, aa = by[("baseline", 0)], by[("aa_control", 0)]
    assert aa.config["sampling_stream"] == 1 and base.config["sampling_stream"] == 0
    assert aa.identity["config"]["sampling_stream"] == 1 and aa.overrides == {"sampling_stream": 1}
    assert by[("no_update_control", 1)].config["optim"]["lr"] == 0.0
    assert by[("half_lr_control", 1)].config["optim"]["lr"] == EngineConfig().optim.lr / 2
    # the same engine (only the tracker run's name differs)
    assert by[("drop_half_control", 0)].identity["config"] == base.identity["config"]
    assert by[("drop_half_control", 0)].config["tracking"]["run_name"] == "drop_half_control-seed0"


def test_workers_get_the_arms_engine_and_adding_a_control_reuses_finished_runs(tmp_path):
    run_compare(exp(), tmp_path, workers=1, progress=False, plots=False, train_fn=RECORD)
    (tmp_path / "calls.log").unlink()
    res = run_compare(
        exp(controls=["aa", "no_update", "drop_half"]),
        tmp_path,
        workers=2,
        progress=False,
        plots=False,
        train_fn=RECORD,
    )
    assert res.execution.skipped == 4 and len(res.execution.done) == 10
    ran = sorted((tmp_path / "calls.log").read_text().splitlines())
    assert ran == sorted(
        f"{m} {s} False"
        for m in ("aa_control", "no_update_control", "drop_half_control")
        for s in (0, 1)
    )

    def seen(label):
        return json.loads((tmp_path / "runs" / label / "seed1" / "seen.json").read_text())

    assert seen("aa_control") == {
        "lr": EngineConfig().optim.lr,
        "sampling_stream": 1,
        "select": None,
    }
    assert seen("no_update_control")["lr"] == 0.0
    assert seen("drop_half_control")["select"]["actuator"]["name"] == "random_groups"
    run = json.loads((tmp_path / "runs" / "no_update_control" / "seed0" / "run.json").read_text())
    assert run["overrides"] == {"optim": {"lr": 0.0}}
    report = (tmp_path / "report.md").read_text()
    assert "no_update_control" in report and "aa_control" in report


def test_cli_control_flag_and_dry_run(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text(json.dumps(MINIMAL))
    assert (
        run_cli(
            [
                "compare",
                str(path),
                "--dry-run",
                "--out",
                str(tmp_path / "o"),
                "--control",
                "half_lr",
                "--control",
                "aa",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8
    assert lines[2].split()[:3] == ["half_lr_control", "seed", "0"]
    assert lines[2].endswith(f"engine {{'optim': {{'lr': {EngineConfig().optim.lr / 2}}}}}")
    with pytest.raises(ConfigError, match="--until-decided needs --max-seeds"):
        run_cli(["compare", str(path), "--until-decided"])
    with pytest.raises(ConfigError, match="go with --until-decided"):
        run_cli(["compare", str(path), "--margin", "0.01"])


# ---------------------------------------------------------------- run ids stay as they were
#: one experiment per host with every control (absolute paths that need not exist: planning
#: reads no file)
PINNED_HOSTS = {
    "engine": {
        "engine": {"tasks": {"domains": ["math", "logic"]}, "optim": {"lr": 0.04}},
        "evaluation": {"every": 2, "per_domain": 5},
    },
    "trl": {
        "host": "trl",
        "trl": {"exports": "/pinned/exported", "lr": 0.04},
        "evaluation": {"metric": "sampled", "every": 2, "per_domain": 5, "samples": 2},
    },
    "verl": {
        "host": "verl",
        "verl": {
            "model": "/pinned/model",
            "train_files": "/pinned/t.parquet",
            "val_files": "/pinned/v.parquet",
            "lr": 4e-6,
        },
        "evaluation": {"metric": "greedy", "every": 2},
    },
}
#: their fingerprints (first 16 hex digits) computed at 600e367, when each host wrote its own
#: control mapping; a change here means finished and unfinished runs of existing comparisons
#: no longer resume. verl's recomputed when evaluation.per_domain began to apply on verl (its
#: runs validate on another held-out set, eval_per_domain in their settings); the engine's and
#: TRL's when the sampling stream got one name on every host (noise_stream -> sampling_stream)
#: and TRL's learning rate became trl.lr (issue 30); the engine's again when every run's identity
#: began to name its host, the engine's included (issue 30's pre-release compatibility removed),
#: and when its domain column became tasks.domain_key, null by default, as on verl and TRL;
#: and when the engine config gained its asynchronous section (issue 40)
PINNED = {
    "engine": {
        "baseline": "c1a73a855a8775c8",
        "aa_control": "1430ebcf108525b9",
        "no_update_control": "68bca55f6c9423c9",
        "half_lr_control": "901460a52d4ca9c2",
        "drop_half_control": "a2615df9c0e3d552",
    },
    "trl": {
        "baseline": "41c8660cdf69ae57",
        "aa_control": "880fbbde734fba4b",
        "no_update_control": "1a13dcd7ab33ed13",
        "half_lr_control": "f73d04705fd3da42",
        "drop_half_control": "41badce6dde3f690",
    },
    "verl": {
        "baseline": "37ece964bb02f456",
        "aa_control": "df910aee55582871",
        "no_update_control": "54addc460f98e3f0",
        "half_lr_control": "6b3430ced50d5a3d",
        "drop_half_control": "05f21bc44b63b26b",
    },
}


@pytest.mark.parametrize("host", list(PINNED_HOSTS))
def test_control_arms_fingerprints_are_the_pinned_ones(host):
    data = {
        "name": "pin",
        "strategies": ["baseline"],
        "seeds": [3],
        "controls": ["aa", "no_update", "half_lr", "drop_half"],
        "budget": {"steps": 4, "prompts_per_step": 4, "samples_per_prompt": 2},
        **PINNED_HOSTS[host],
    }
    runs = plan(parse_experiment(data), "/o")
    assert {r.method: r.fingerprint[:16] for r in runs} == PINNED[host]
