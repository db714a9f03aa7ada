"""``dataflex-rl compare`` with ``host: trl`` end to end: the harness in the main venv
(.venv, as a user runs it) starts each run under this TRL venv's Python.

- 2 arms (baseline and the aa control) x 2 seeds, 6 TRL steps each: results.csv holds exactly
  what each run's own ``trainer_state.json`` log history says (read here by a plain loop), the
  step-0 evaluations of a seed's arms are identical (the report's pairing check passes) while
  the aa arm trains on another sampling stream;
- a run killed after its first checkpoint resumes from it on rerun (done.json says so) and
  ends with exactly the uninterrupted run's results.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / ".venv" / "bin" / "python"
DOMAINS = ["math", "logic", "science"]


def write_experiment(folder: Path, exports: Path, **top) -> Path:
    import yaml

    exp = {
        "name": "trl_e2e",
        "host": "trl",
        "strategies": ["baseline"],
        "seeds": 2,
        "budget": {"steps": 6, "prompts_per_step": 2, "samples_per_prompt": 4},
        "evaluation": {"metric": "sampled", "every": 2, "per_domain": 6, "samples": 2},
        "statistics": {"n_boot": 200, "n_perm": 200},
        "trl": {
            "python": sys.executable,
            "exports": str(exports),
            "lr": 0.05,
            "grpo": {
                "use_cpu": True,
                "bf16": False,
                "optim": "sgd",
                "max_completion_length": 8,
            },
        },
        **top,
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def compare(exp: Path, out: Path, wait: bool = True, path: tuple[str, ...] = ()):
    if not HARNESS.exists():
        pytest.skip(f"{HARNESS} missing (bash scripts/setup.sh creates the main venv)")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*path, str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    argv = [str(HARNESS), "-m", "dataflex_rl.cli", "compare", str(exp), "--out", str(out)]
    argv += ["--no-progress", "--no-plots", "--workers", "2"]
    if not wait:
        return subprocess.Popen(
            argv, env=env, cwd=out.parent, start_new_session=True, stdout=subprocess.DEVNULL
        )
    done = subprocess.run(argv, env=env, cwd=out.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def results(out: Path) -> dict[tuple, float]:
    with (out / "results.csv").open() as f:
        return {
            (r["method"], int(r["seed"]), r["domain"], int(r["step"])): float(r["score"])
            for r in csv.DictReader(f)
        }


def from_trainer_state(run_dir: Path) -> dict[tuple, float]:
    """(domain, step) -> eval_rewards/correct/mean of the entry naming that domain."""
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    found = {}
    for entry in history:
        for d in DOMAINS:
            if f"eval_{d}_loss" in entry:
                found[(d, entry["step"])] = entry["eval_rewards/correct/mean"]
    return found


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trl_compare")
    exp = write_experiment(folder, folder / "exported", controls=["aa"])
    t0 = time.perf_counter()
    done = compare(exp, folder / "out")
    return folder, done, time.perf_counter() - t0


def test_results_are_the_trainers_log_history(paired):
    folder, _, _ = paired
    out = folder / "out"
    got = results(out)
    assert {(m, s) for m, s, _, _ in got} == {
        (m, s) for m in ("baseline", "aa_control") for s in (0, 1)
    }
    for method in ("baseline", "aa_control"):
        for seed in (0, 1):
            own = from_trainer_state(out / "runs" / method / f"seed{seed}")
            # evaluated at 0 (eval_on_start), every 2 steps and at the end
            assert sorted({step for _, step in own}) == [0, 2, 4, 6]
            assert {
                (d, st): v for (m, s, d, st), v in got.items() if (m, s) == (method, seed)
            } == own


def test_arms_of_a_seed_are_paired_and_aa_samples_another_stream(paired):
    folder, _, _ = paired
    out = folder / "out"
    got = results(out)
    for seed in (0, 1):
        for d in DOMAINS:
            assert got[("baseline", seed, d, 0)] == got[("aa_control", seed, d, 0)]
    assert "pairing check passed" in (out / "report.md").read_text()

    def first_step(method, seed):
        lines = (out / "runs" / method / f"seed{seed}" / "metrics.jsonl").read_text().splitlines()
        train = [json.loads(x) for x in lines if '"completions/mean_length"' in x]
        assert len(train) == 6  # one log line per training step
        return [(r["completions/mean_length"], r["rewards/correct/mean"]) for r in train]

    # the same prompts (one sampler seed), other samples: the training logs part ways
    assert first_step("baseline", 0) != first_step("aa_control", 0)
    done = json.loads((out / "runs" / "aa_control" / "seed0" / "done.json").read_text())
    assert done["identity"]["config"]["sampling_stream"] == 1 and done["identity"]["host"] == "trl"


def test_killed_run_resumes_from_its_checkpoint_with_the_same_results(paired, tmp_path):
    folder, _, _ = paired
    exp = write_experiment(tmp_path, folder / "exported", seeds=[0])
    out = tmp_path / "out"
    run_dir = out / "runs" / "baseline" / "seed0"
    proc = compare(exp, out, wait=False)
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoint-2" / "trainer_state.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint-2"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # compare, its workers, and (dying with them) the run
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (run_dir / "done.json").exists()
    time.sleep(1.0)  # the run's process dies with its starter
    compare(exp, out)
    done = json.loads((run_dir / "done.json").read_text())
    assert done["resumed"] is True
    assert Path(done["summary"]["resumed_from"]).name.startswith("checkpoint-")
    # exactly the uninterrupted run of the same configuration (the paired test's baseline)
    straight = {k: v for k, v in results(folder / "out").items() if k[:2] == ("baseline", 0)}
    assert results(out) == straight


def test_a_wrong_grpo_field_is_refused_before_any_run(paired, tmp_path):
    folder, _, _ = paired
    exp = write_experiment(tmp_path, folder / "exported")
    import yaml

    data = yaml.safe_load(exp.read_text())
    data["trl"]["grpo"]["lerning_rate"] = 0.05
    exp.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    argv = [str(HARNESS), "-m", "dataflex_rl.cli", "compare", str(exp), "--out", str(out)]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "trl.grpo.lerning_rate: not a GRPOConfig field of trl 1.16. Did you mean 'learning_rate'"
        in done.stderr
    )
    assert not (out / "runs").exists()


def test_trls_default_learning_rate_is_the_one_half_lr_halves():
    import dataclasses

    from trl import GRPOConfig

    from dataflex_rl.hosts.trl.host import TRL_DEFAULT_LR

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    assert fields["learning_rate"].default == TRL_DEFAULT_LR


def test_check_settings_names_the_key():
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.hosts.trl.run import check_settings

    grpo = {"max_steps": 1, "use_cpu": True, "bf16": False}
    settings = {"grpo": grpo, "rewards": ["dataflex_rl.tasks.rewards:nope"]}
    with pytest.raises(ConfigError, match=r"trl\.rewards\[0\]: module .* has no attribute 'nope'"):
        check_settings(settings, "dataflex_rl.hosts.trl.run:run_training")
    settings["grpo"]["lr_scheduler_type"] = "nope"
    with pytest.raises(ConfigError, match=r"trl\.grpo: GRPOConfig refuses these fields: nope"):
        check_settings(settings, "dataflex_rl.hosts.trl.run:run_training")
    settings["grpo"].update(lr_scheduler_type="constant", scale_rewards="batch")
    recompute = {"name": "r", "select": {"preset": "difffilter", "recompute_advantages": True}}
    with pytest.raises(ConfigError, match=r"trl\.grpo: strategy 'r' does not fit: .*recompute"):
        check_settings(settings, "x:y", strategies=[recompute])


def test_a_strategy_yaml_with_user_components_runs_on_trl(paired, tmp_path):
    """examples/custom_strategy: the user's scorer and actuator (module:attr from their own
    module on PYTHONPATH) in a strategy YAML, in a TRL run, as in the engine."""
    folder, _, _ = paired
    custom = ROOT / "examples" / "custom_strategy"
    exp = write_experiment(
        tmp_path,
        folder / "exported",
        strategies=[str(custom / "strategy.yaml")],
        baseline="strategy",
        seeds=[0],
        budget={"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 4},
    )
    out = tmp_path / "out"
    compare(exp, out, path=(str(custom),))
    run = out / "runs" / "strategy" / "seed0"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if "dataflex/select/active" in r]
    assert len(train) == 2 and all(r["dataflex/select/active"] == 1.0 for r in train)
    assert all("dataflex/weight_std" in r for r in train)  # the reweighter acted too
    assert json.loads((run / "done.json").read_text())["status"] == "done"
