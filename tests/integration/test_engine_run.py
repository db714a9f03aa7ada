"""Engine runs end to end: determinism, exact resume, output files, clear errors, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.policy import load_policy, parameter_hash
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.hosts.engine.runlog import read_metrics
from tests.unit.test_metrics_doc import documented_keys, matches

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = str(ROOT / "configs" / "strategies" / "everything.yaml")

BASE = {
    "policy": "tiny",
    "steps": 4,
    "threads": 1,
    "grpo": {"prompts_per_step": 6, "group_size": 4},
    "tasks": {"train_size": 60},
    "eval": {"per_domain": 8, "samples": 1, "every": 2},
    "log": {"progress": False, "plots": False, "checkpoint_every": 2},
}


def config(**top):
    return load_config({**BASE, **top})


def test_same_seed_same_hash_other_seed_other_hash(tmp_path):
    a = run_training(config(), "maxvar", seed=3, steps=3, out_dir=tmp_path / "a")
    b = run_training(config(), "maxvar", seed=3, steps=3, out_dir=tmp_path / "b")
    c = run_training(config(), "maxvar", seed=4, steps=3, out_dir=tmp_path / "c")
    assert a["parameter_sha256"] == b["parameter_sha256"]
    assert a["parameter_sha256"] != c["parameter_sha256"]

    def strip(rs):
        return [
            {k: v for k, v in r.items() if not k.startswith("time") and k != "dataflex/time_ms"}
            for r in rs
        ]

    assert strip(read_metrics(tmp_path / "a")) == strip(read_metrics(tmp_path / "b"))


@pytest.mark.parametrize("strategy", ["baseline", EVERYTHING], ids=["baseline", "everything"])
def test_resume_gives_the_uninterrupted_hash(tmp_path, strategy):
    full = run_training(config(), strategy, seed=1, steps=5, out_dir=tmp_path / "full")
    run_training(config(), strategy, seed=1, steps=2, out_dir=tmp_path / "cut")
    resumed = run_training(
        config(), strategy, seed=1, steps=5, out_dir=tmp_path / "cut", resume=True
    )
    assert resumed["parameter_sha256"] == full["parameter_sha256"]
    # and training did move the parameters, so the equality is not trivial
    assert full["parameter_sha256"] != parameter_hash(load_policy("tiny").model)
    train = [r for r in read_metrics(tmp_path / "cut") if r["kind"] == "train"]
    assert [r["step"] for r in train] == [0, 1, 2, 3, 4]


PROBE = {
    "name": "probe",
    "select": {"preset": "difffilter"},
    "prerollout": {
        "actuator": {
            "name": "probe",
            "layer": 1,
            "min_observed": 6,
            "threshold": 0.3,
            "audit": 0.5,
            "max_false_skip": None,
            "revisits": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0},
        }
    },
}


def _no_time(records):
    """Metrics records without wall-clock figures."""
    clock = ("dataflex/time_ms", "dataflex/prerollout/seconds_saved_est")
    return [
        {k: v for k, v in r.items() if not k.startswith("time") and k not in clock} for r in records
    ]


def test_probe_skips_audits_and_resumes_exactly(tmp_path):
    cfg = config(tasks={"train_size": 60, "candidate_factor": 2.0})
    full = run_training(cfg, PROBE, seed=1, steps=5, out_dir=tmp_path / "full")
    run_training(cfg, PROBE, seed=1, steps=2, out_dir=tmp_path / "cut")
    resumed = run_training(cfg, PROBE, seed=1, steps=5, out_dir=tmp_path / "cut", resume=True)
    assert resumed["parameter_sha256"] == full["parameter_sha256"]
    train = [r for r in read_metrics(tmp_path / "full") if r["kind"] == "train"]
    total = {
        k: sum(r.get(f"dataflex/prerollout/{k}", 0.0) for r in train)
        for k in ("skipped_probe", "audited", "audit_groups", "probe_tokens")
    }
    # the run did skip, audit and pay for the probe's forward passes (layer 1 of 4)
    assert total["skipped_probe"] > 0 and total["audited"] > 0
    assert total["audit_groups"] == total["audited"] and total["probe_tokens"] > 0
    for r in train:
        assert r["engine/generation_cost_tokens"] == (
            r["engine/tokens_generated"]
            + r.get("engine/tokens_audit", 0.0)
            + r.get("dataflex/prerollout/probe_tokens", 0.0)
        )
    assert _no_time(read_metrics(tmp_path / "cut")) == _no_time(read_metrics(tmp_path / "full"))


def test_controlled_probe_resumes_exactly(tmp_path):
    # the false-skip control (a loose target so that 5 short steps move it): its audit sample
    # and threshold are saved with the checkpoint at step 2 and restored exactly
    act = {**PROBE["prerollout"]["actuator"], "max_false_skip": 0.9, "confidence": 0.6}
    strategy = {**PROBE, "prerollout": {"actuator": {**act, "audit": 1.0}}}
    cfg = config(tasks={"train_size": 60, "candidate_factor": 2.0})
    full = run_training(cfg, strategy, seed=1, steps=5, out_dir=tmp_path / "full")
    run_training(cfg, strategy, seed=1, steps=2, out_dir=tmp_path / "cut")
    resumed = run_training(cfg, strategy, seed=1, steps=5, out_dir=tmp_path / "cut", resume=True)
    assert resumed["parameter_sha256"] == full["parameter_sha256"]
    train = [r for r in read_metrics(tmp_path / "full") if r["kind"] == "train"]
    sample = [r["dataflex/prerollout/probe_audit_sample"] for r in train]
    assert sample[2] > 0  # the control had outcomes at the cut
    thresholds = [r["dataflex/prerollout/probe_threshold"] for r in train]
    assert min(thresholds[3:]) < 1.0  # and a threshold after it
    assert _no_time(read_metrics(tmp_path / "cut")) == _no_time(read_metrics(tmp_path / "full"))


def test_probe_decisions_are_logged_and_the_log_replays(tmp_path):
    from dataflex_rl.harness.replay.replay import read_log, replay

    cfg = config(tasks={"train_size": 60, "candidate_factor": 2.0}, decision_log={"enabled": True})
    run_training(cfg, PROBE, seed=1, steps=4, out_dir=tmp_path / "run")
    train = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "train"]
    log = read_log(tmp_path / "run" / "decisions")
    for name in ("skipped_probe", "audited", "audit_groups", "audit_informative"):
        logged = [0.0 if v != v else float(v) for v in log.steps[f"prerollout_{name}"]]
        assert logged == [r.get(f"dataflex/prerollout/{name}", 0.0) for r in train], name
    assert sum(log.steps["prerollout_audit_groups"] > 0) > 0
    res = replay(log, [PROBE, "difffilter"], labels=["probe", "difffilter"])
    assert any("prompt representation" in n for n in res.notes["probe"])
    assert res.overall  # the run's own decisions (select) replay; its skips are not replayed


def test_generated_tokens_budget_stops_the_run(tmp_path):
    first = run_training(config(), "baseline", seed=2, steps=2, out_dir=tmp_path / "a")
    train = [r for r in read_metrics(tmp_path / "a") if r["kind"] == "train"]
    after_one = train[0]["engine/generation_cost_tokens_total"]
    assert (
        train[1]["engine/generation_cost_tokens_total"]
        == after_one + train[1]["engine/tokens_generated"]
    )
    # a budget reached during step 0 stops after it; the same seed trains identically
    cut = run_training(
        config(generated_tokens=int(after_one)), "baseline", seed=2, steps=9, out_dir=tmp_path / "b"
    )
    assert cut["steps"] == 1
    assert first["parameter_sha256"] != cut["parameter_sha256"]
    one = run_training(config(), "baseline", seed=2, steps=1, out_dir=tmp_path / "c")
    assert one["parameter_sha256"] == cut["parameter_sha256"]


def test_outputs_metrics_plots_and_summary(tmp_path):
    cfg = config(log={**BASE["log"], "plots": True})
    s = run_training(cfg, "softmax", seed=0, steps=2, out_dir=tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]
    for key in (
        "loss/policy",
        "train/reward",
        "dataflex/kept_response_fraction",
        "dataflex/weight_ess",
        "dataflex/mix/domain/math/actual",
        "time/step_s",
    ):
        assert key in train[0], key
    documented = documented_keys()  # every key written is in docs/metrics.md
    assert not [
        k for r in records for k in r if k not in ("kind", "step") and not matches(k, documented)
    ]
    for d in ("math", "logic", "science"):
        assert 0.0 <= s["final_eval"][f"eval/{d}/greedy"] <= 1.0
        assert f"eval/{d}/sampled" in s["final_eval"]
    for name in ("accuracy", "domains", "kept", "weights"):
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 1000
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2
    assert (tmp_path / "checkpoints" / "step-00000002" / "MANIFEST.json").is_file()


def test_existing_run_needs_resume(tmp_path):
    run_training(config(), "baseline", steps=1, out_dir=tmp_path)
    with pytest.raises(ConfigError, match="--resume"):
        run_training(config(), "baseline", steps=1, out_dir=tmp_path)


def test_resume_without_checkpoint_starts_fresh_with_a_message(tmp_path):
    fresh = run_training(config(), "baseline", steps=1, out_dir=tmp_path / "fresh")
    # killed before the first checkpoint: a metrics file with a train record, no checkpoint
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "metrics.jsonl").write_text('{"kind": "eval", "step": 0}\n{"kind": "tr')
    with pytest.warns(UserWarning, match="no checkpoint.*starting from step 0"):
        s = run_training(config(), "baseline", steps=1, out_dir=cut, resume=True)
    assert s["parameter_sha256"] == fresh["parameter_sha256"]
    assert [r["step"] for r in read_metrics(cut) if r["kind"] == "train"] == [0]


def test_resume_drops_a_torn_last_metrics_line_and_continues_exactly(tmp_path):
    full = run_training(config(), "baseline", seed=2, steps=4, out_dir=tmp_path / "full")
    run_training(config(), "baseline", seed=2, steps=3, out_dir=tmp_path / "cut")
    # the checkpoint is at step 2 (checkpoint_every 2) plus the final one at 3; cut the file
    # mid-write after the last record
    path = tmp_path / "cut" / "metrics.jsonl"
    path.write_text(path.read_text() + '{"kind": "train", "loss/pol')
    with pytest.warns(UserWarning, match="line .* was cut off"):
        resumed = run_training(
            config(), "baseline", seed=2, steps=4, out_dir=tmp_path / "cut", resume=True
        )
    assert resumed["parameter_sha256"] == full["parameter_sha256"]
    records = read_metrics(tmp_path / "cut")  # valid JSONL again
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1, 2, 3]


def test_a_corrupt_metrics_line_inside_the_file_is_named(tmp_path):
    run_training(config(), "baseline", steps=2, out_dir=tmp_path)
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"metrics\.jsonl: line 2 is not valid JSON"):
        run_training(config(), "baseline", steps=3, out_dir=tmp_path, resume=True)


def test_resume_with_fewer_steps_than_the_checkpoint_is_refused_and_loses_nothing(tmp_path):
    run_training(config(), "baseline", steps=3, out_dir=tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"--steps 2: below the checkpoint's step 3"):
        run_training(config(), "baseline", steps=2, out_dir=tmp_path, resume=True)
    assert (tmp_path / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize(
    "data, match",
    [
        ({"stpes": 3}, r"config\.stpes: unknown key\. Did you mean 'steps'"),
        ({"grpo": {"group_size": 1}}, r"config\.grpo\.group_size: must be >= 2"),
        ({"grpo": {"temperature": "hot"}}, r"config\.grpo\.temperature: expected float"),
        ({"optim": {"lr": 1e-3, "betas": [0.9]}}, r"optim\.betas"),
        ({"tasks": {"domains": ["math", "math"]}}, r"tasks\.domains"),
        ({"eval": "often"}, r"config\.eval: expected a mapping"),
    ],
)
def test_invalid_configs_name_the_key(data, match):
    with pytest.raises(ConfigError, match=match):
        load_config(data)


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1,\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        run_training(
            config(policy=str(tmp_path / "nomodel")), "baseline", steps=1, out_dir=tmp_path / "o"
        )
    with pytest.raises(ConfigError, match="Did you mean 'difffilter'"):
        run_training(config(), "difffliter", steps=1, out_dir=tmp_path / "p")


def test_cli_train_and_errors(tmp_path, capsys):
    from dataflex_rl.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "policy: tiny\nsteps: 1\ngrpo: {prompts_per_step: 4, group_size: 2}\n"
        "tasks: {train_size: 30}\neval: {per_domain: 4, samples: 0}\n"
        "log: {plots: false, progress: false}\n"
    )
    assert main(["train", str(cfg), "--strategy", "topk", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "topk" in out and "parameter sha256" in out
    cfg.write_text("polcy: tiny\n")
    assert main(["train", str(cfg)]) == 2
    assert "polcy: unknown key" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
