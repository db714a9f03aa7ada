"""Contract of every registered host (`dataflex_rl.hosts.registry.HOSTS`), member by member.

A host registered there is run here through every member of `Host` the moment it is
registered: its section parsed, its domains, each arm's run settings holding what the controls
change, its training function's form, its Python, the check before any run (a missing Python
refused naming the key), the report's Setup lines, one run trained by a stand-in training
function with the one signature every host's has, and that run's files read back (records,
checkpoint, progress). ``RUN_FILES`` writes what each host's real runs leave, so the readers
are checked against hand-worked values.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.experiment import parse_experiment
from dataflex_rl.harness.running.runner import RunSpec
from dataflex_rl.hosts.host import Host, HostControls
from dataflex_rl.hosts.registry import HOSTS, class_path, get_host

CALLS: list[tuple] = []
STANDIN = "tests.contract.test_hosts:standin_training"


def standin_training(settings, strategy, *, seed, out_dir, resume):
    """A training function with the signature of every host's: records what it received and
    leaves the files its host's real runs leave (`RUN_FILES`)."""
    CALLS.append((settings, strategy["name"], seed, out_dir, resume))
    host = json.loads(Path(out_dir, "host.txt").read_text())
    RUN_FILES[host](Path(out_dir))
    return {"seed": seed}


def _engine_files(out: Path) -> None:
    lines = [
        {"kind": "eval", "step": 0, "eval/math/sampled": 0.25},
        {"kind": "train", "step": 0},
        {"kind": "train", "step": 1},
        {"kind": "eval", "step": 2, "eval/math/sampled": 0.5},
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (out / "checkpoints" / "step-00000002").mkdir(parents=True)


def _trl_files(out: Path) -> None:
    history = [
        {"step": 0, "eval_math_loss": 0.0, "eval_rewards/correct/mean": 0.25},
        {"step": 1, "loss": 0.1},
        {"step": 2, "loss": 0.1},
        {"step": 2, "eval_math_loss": 0.0, "eval_rewards/correct/mean": 0.5},
    ]
    (out / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    lines = [{"kind": "train", "step": 0}, {"kind": "train", "step": 1}]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _verl_files(out: Path) -> None:
    lines = [
        {"step": 0, "data": {"val-core/math/acc/mean@4": 0.25}},
        {"step": 1, "data": {"training/global_step": 1}},
        {"step": 2, "data": {"training/global_step": 2, "val-core/math/acc/mean@4": 0.5}},
    ]
    (out / "verl_metrics").mkdir()
    (out / "verl_metrics" / "attempt-1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines)
    )
    (out / "ckpt").mkdir()
    (out / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")


#: host -> what one of its runs leaves: evaluations at steps 0 (0.25) and 2 (0.5) of domain
#: math, 2 training steps done, a checkpoint
RUN_FILES = {"engine": _engine_files, "trl": _trl_files, "verl": _verl_files}


def experiment(name: str, tmp_path: Path):
    data = {
        "name": "contract",
        "host": name,
        "strategies": ["baseline"],
        "seeds": 1,
        "budget": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
        "evaluation": {"metric": "sampled", "every": 2, "per_domain": 4, "samples": 4},
    }
    missing = str(tmp_path / "no" / "python")
    if name == "engine":
        data["engine"] = {"tasks": {"domains": ["math"]}}
    elif name == "trl":
        data["trl"] = {"python": missing, "eval": {"math": str(tmp_path / "math.parquet")}}
    elif name == "verl":
        data["verl"] = {
            "python": missing,
            "model": str(tmp_path),
            "train_files": str(tmp_path / "train.parquet"),
            "val_files": str(tmp_path / "val.parquet"),
            "domains": ["math"],
        }
    return parse_experiment(data, "exp.yaml", tmp_path)


def _get(settings: dict, path: str):
    node = settings
    for key in path.split("."):
        node = node[key]
    return node


def test_every_host_is_registered_with_the_hosts_it_names():
    assert HOSTS.names() == sorted(RUN_FILES)
    for name in HOSTS.names():
        host = get_host(name)
        assert isinstance(host, Host) and host.name == name


def test_an_unknown_host_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"host: unknown host 'engin'\. Did you mean 'engine'"):
        get_host("engin")
    with pytest.raises(ConfigError, match="Hosts: engine, trl, verl"):
        get_host("nope")


@pytest.mark.parametrize("name", HOSTS.names())
def test_settings_and_planning(name, tmp_path):
    host, exp = get_host(name), experiment(name, tmp_path)
    assert exp.host_impl.name == name
    assert isinstance(host.setup, str) and host.setup.startswith("bash scripts/")
    assert host.tracking is None or f"{name}." in host.tracking
    # its section of the experiment file (`experiment_file`) and what it can do, declared
    assert isinstance(host.section_doc, str) and host.section_doc.startswith(f"host {name}")
    assert isinstance(host.requires, tuple) and all(isinstance(m, str) for m in host.requires)
    assert host.token_budget or host.no_token_budget
    assert isinstance(host.evaluation_only, bool) and isinstance(host.no_evaluation_only, str)
    assert set(host.schemas) and all(isinstance(s, type) for s in host.schemas.values())
    assert host.domains(exp) == ["math"]
    settings = host.run_config(exp, {})
    assert isinstance(settings, dict) and json.loads(json.dumps(settings)) == settings
    # the controls' keys are where the run's settings hold them
    assert isinstance(host.controls, HostControls)
    lr = 0.5
    arm = host.run_config(exp, _nested(host.controls.lr, lr))
    assert _get(arm, host.controls.lr) == lr
    arm = host.run_config(exp, _nested(host.controls.stream, 3))
    assert _get(arm, host.controls.stream) == 3
    module, _, attr = host.train_fn(exp).partition(":")
    assert attr and importlib.util.find_spec(module) is not None
    lines = host.setup_lines(exp)
    assert len(lines) >= 2 and all(isinstance(x, str) and x for x in lines)


@pytest.mark.parametrize("name", HOSTS.names())
def test_python_and_check(name, tmp_path):
    host, exp = get_host(name), experiment(name, tmp_path)
    python = host.python(exp)
    if python is None:  # runs in the harness's own worker processes: nothing to refuse
        assert host.check(exp) is None
        return
    assert Path(python).is_absolute()
    with pytest.raises(ConfigError, match=rf"exp\.yaml: {name}\.python: .* does not exist"):
        host.check(exp)
    assert get_host(name).python(experiment(name, tmp_path)) == python


@pytest.mark.parametrize("name", HOSTS.names())
def test_a_run_trains_and_its_files_read_back(name, tmp_path):
    host, exp = get_host(name), experiment(name, tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "host.txt").write_text(json.dumps(name))
    assert not host.has_checkpoint(out) and host.steps_done(out) == 0
    config = host.run_config(exp, {})
    ref = class_path(host)
    run = RunSpec("baseline", 3, {"name": "baseline"}, config, 2, str(out), STANDIN, name, ref)
    CALLS.clear()
    assert host.train(run, out, False) == ({"seed": 3}, False)
    ((settings, strategy, seed, out_dir, resume),) = CALLS
    assert (strategy, seed, out_dir, resume) == ("baseline", 3, str(out), False)
    assert settings == host.run_settings(config)
    evals, props = host.read_records(out, config, mixes=True)
    assert [(e["step"], e["math/sampled"]) for e in evals] == [(0, 0.25), (2, 0.5)]
    assert props == []
    assert host.has_checkpoint(out)
    assert host.steps_done(out) == 2


def _nested(path: str, value) -> dict:
    head, _, tail = path.partition(".")
    return {head: _nested(tail, value) if tail else value}


def test_the_stand_in_has_the_signature_of_every_hosts_training_function():
    import inspect

    params = inspect.signature(standin_training).parameters
    assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY] == [
        "seed",
        "out_dir",
        "resume",
    ]
    assert sys.modules[__name__].STANDIN.endswith(":standin_training")
