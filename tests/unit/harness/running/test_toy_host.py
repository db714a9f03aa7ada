"""A host the harness has never heard of runs through ``compare`` once registered.

`toy_host.ToyHost` is registered from here (`HOSTS.register`) for each test, with no edit of
the harness: the experiment file gains its ``toy:`` section, the harness checks what it can
do (steps 0, a token budget, trackers) from its declared attributes, its runs execute in the
local executor's worker processes (which import it by its class path) and the report reads
its records.
"""

from __future__ import annotations

import csv

import pytest
import yaml

from dataflex_rl.cli import main
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.experiment import experiment_file, parse_experiment
from dataflex_rl.hosts.registry import HOSTS
from tests.unit.harness.running.toy_host import ToyHost, base_accuracy

EXPERIMENT = {
    "name": "toy",
    "host": "toy",
    "strategies": ["baseline", "difffilter"],
    "seeds": 2,
    "budget": {"steps": 3, "prompts_per_step": 2, "samples_per_prompt": 2},
    "evaluation": {"metric": "greedy", "every": 0, "per_domain": 50},
    "toy": {"domains": ["alpha", "beta"], "effects": {"difffilter": 0.2}},
}


@pytest.fixture
def toy(monkeypatch):
    """``toy`` registered for one test; the registry as it was afterwards."""
    monkeypatch.setattr(HOSTS, "_all", dict(HOSTS._all))
    HOSTS.register("toy", ToyHost)


def test_the_experiment_file_has_a_section_per_registered_host(toy, monkeypatch):
    keys = {f.name for f in __import__("dataclasses").fields(experiment_file())}
    assert {"engine", "trl", "verl", "toy"} <= keys
    exp = parse_experiment(EXPERIMENT, "exp.yaml")
    assert exp.host == "toy" and exp.host_impl.name == "toy"
    assert exp.host_settings["effects"] == {"difffilter": 0.2}
    with pytest.raises(ConfigError, match=r"exp\.yaml: toy\.domainz: unknown key"):
        parse_experiment({**EXPERIMENT, "toy": {"domainz": []}}, "exp.yaml")
    with pytest.raises(ConfigError, match=r"exp\.yaml: engine: the settings of host 'engine'"):
        parse_experiment({**EXPERIMENT, "engine": {}}, "exp.yaml")


def test_an_unregistered_host_is_refused_listing_the_registered_ones():
    with pytest.raises(
        ConfigError, match=r"exp\.yaml: host: must be one of 'engine', 'trl', 'verl', got 'toy'"
    ):
        parse_experiment(EXPERIMENT, "exp.yaml")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"budget": {"steps": 0}},
            r"exp\.yaml: budget\.steps: host 'toy' trains at least 1 step \(steps: 0, "
            r"evaluation only, is for engine runs\)",
        ),
        (
            {"budget": {"steps": 3, "generated_tokens": 100}},
            r"exp\.yaml: budget\.generated_tokens: host 'toy' cannot stop a run at a generation "
            r"cost: its runs do not generate\. Hosts that can: engine\.",
        ),
        (
            {"tracking": {"backends": ["tensorboard"]}},
            r"exp\.yaml: tracking: the experiment's trackers follow engine runs and their "
            r"report; host 'toy' runs log through their own: set nothing",
        ),
    ],
)
def test_what_the_host_cannot_do_is_refused_from_its_declared_attributes(toy, change, message):
    with pytest.raises(ConfigError, match=message):
        parse_experiment({**EXPERIMENT, **change}, "exp.yaml")


def test_compare_runs_the_toy_host_and_reports_a_verdict(toy, tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, "controls": ["no_update"]}))
    out = tmp_path / "out"
    argv = ["compare", str(path), "--out", str(out), "--workers", "2", "--no-progress"]
    assert main([*argv, "--no-plots"]) == 0, capsys.readouterr().err
    # 3 arms (2 strategies and the control) × 2 seeds, each run's records read back
    with (out / "results.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["method"], r["seed"]) for r in rows} == {
        (m, s) for m in ("baseline", "difffilter", "no_update_control") for s in ("0", "1")
    }
    for r in rows:
        step, seed, domain = int(r["step"]), int(r["seed"]), r["benchmark"]
        gain = 0.2 if r["method"] == "difffilter" and step == 3 else 0.0
        assert float(r["score"]) == round(50 * (base_accuracy(seed, domain) + gain)) / 50
    report = (out / "report.md").read_text()
    assert "host: toy, domains alpha, beta" in report
    assert "pairing check passed" in report
    header = next(line for line in report.splitlines() if line.startswith("| method"))
    assert header.rstrip(" |").endswith("verdict")
    assert "difffilter" in report and "no_update_control" in report


def test_what_the_hosts_runs_import_is_checked_before_any_run(toy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ToyHost, "requires", ("no_such_module_39c",))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--out", str(out), "--no-progress", "--no-plots"]) != 0
    err = capsys.readouterr().err
    assert "dataflex-rl compare (host toy's runs) needs 'no_such_module_39c'" in err
    assert not out.exists()
