"""A real tiny engine run logging to TensorBoard, W&B (offline) and MLflow (local SQLite),
read back with each tracker's own reader and compared with ``metrics.jsonl``; resume continues
the same tracker runs without logging a step twice; a missing tracker library stops the run
before any work; a tracker failing mid-run leaves the run intact."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from dataflex_rl.deps import MissingDependencyError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.hosts.engine.runlog import read_metrics
from dataflex_rl.tracking import STATE_FILE, backends
from tests import trackers

BASE = {
    "policy": "tiny",
    "steps": 4,
    "threads": 1,
    "grpo": {"prompts_per_step": 4, "group_size": 4},
    "tasks": {"train_size": 40},
    "eval": {"per_domain": 4, "samples": 0, "every": 2},
    "log": {"progress": False, "plots": True, "checkpoint_every": 2},
}
ALL = {"backends": ["tensorboard", "wandb", "mlflow"], "project": "test"}


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    trackers.offline_env(monkeypatch, tmp_path)


def config(**top):
    return load_config({**BASE, **top})


def numbers(record: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in record.items()
        if k not in ("kind", "step") and isinstance(v, (int, float))
    }


def expected_series(out: Path) -> dict[str, dict[int, float]]:
    """metric -> step -> value from metrics.jsonl (train and eval keys never collide)."""
    series: dict[str, dict[int, float]] = {}
    for r in read_metrics(out):
        for k, v in numbers(r).items():
            series.setdefault(k, {})[r["step"]] = v
    return series


def same(got: dict[int, float], want: dict[int, float], key: str) -> bool:
    """Equal series; a wall-time key only on the same steps (after a resume, W&B and MLflow
    keep the first session's timings of the steps it recomputed, metrics.jsonl the second's)."""
    if key.startswith("time/") or key == "dataflex/time_ms":
        return got.keys() == want.keys()
    return got == pytest.approx(want, rel=1e-6)


def check_trackers(out: Path, strategy: str, seed: int) -> dict:
    """Every tracker holds exactly the metrics.jsonl series, once per step; params and tags
    name the strategy and seed; the plots are there. Returns tracking.json."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    want = expected_series(out)
    state = json.loads((out / STATE_FILE).read_text())
    plots = sorted(p.stem for p in (out / "plots").glob("*.png"))
    assert plots

    # TensorBoard: scalars by metric name with the step as x, purged steps replaced
    acc = trackers.tensorboard_accumulator(out / "tensorboard")
    got = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6), k
    assert sorted(acc.Tags()["images"]) == [f"plots/{p}" for p in plots]
    text = acc.Tensors("params/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f"| strategy | {strategy} |" in text and f"| seed | {seed} |" in text

    # W&B (offline): every history row of every session, no step logged twice
    run_id = state["wandb"]["id"]
    rows = trackers.wandb_history(out, run_id)
    seen: dict[str, dict[int, float]] = {}
    for step, values in rows:
        for k, v in values.items():
            if k.startswith("plots/"):
                continue
            assert step not in seen.setdefault(k, {}), f"W&B logged {k} twice at step {step}"
            seen[k][step] = v
    assert seen.keys() == want.keys()
    for k in want:
        assert same(seen[k], want[k], k), k
    images = {k.split("/")[1] for _, v in rows for k in v if k.startswith("plots/")}
    assert images == set(plots)
    saved = [p for p in out.glob(f"wandb/*-{run_id}/files/summary.json")]
    assert saved and not saved[-1].is_symlink()
    cfg = trackers.wandb_config(out, run_id)
    assert cfg["seed"] == seed and cfg["strategy.name"] == strategy and cfg["optim.lr"] > 0
    assert f"strategy:{strategy}" in trackers.wandb_tags(out, run_id)

    # MLflow (SQLite store under the run folder)
    client = trackers.mlflow_client(state["mlflow"]["tracking_uri"])
    run = client.get_run(state["mlflow"]["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["seed"] == str(seed)
    assert run.data.params["strategy.name"] == strategy
    assert run.data.tags["strategy"] == strategy and run.data.tags["seed"] == str(seed)
    for k in want:
        history = client.get_metric_history(run.info.run_id, k)
        steps = [m.step for m in history]
        assert len(steps) == len(set(steps)), f"MLflow logged {k} twice at a step"
        assert same({m.step: m.value for m in history}, want[k], k), k
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert artifacts == {f"plots/{p}.png" for p in plots}
    assert "summary.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    return state


def test_engine_logs_to_all_three_trackers_and_resumes_into_the_same_runs(tmp_path):
    out = tmp_path / "run"
    run_training(config(tracking=ALL), "maxvar", seed=2, out_dir=out)
    first = check_trackers(out, "maxvar", 2)
    assert (out / "mlflow.db").is_file() and (out / "tensorboard").is_dir()

    # lose the last checkpoint: the resume starts at step 2 and recomputes steps 2 and 3
    # (already in every tracker) before training on to step 6
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    run_training(config(tracking=ALL), "maxvar", seed=2, steps=6, out_dir=out, resume=True)
    second = check_trackers(out, "maxvar", 2)
    assert second["wandb"]["id"] == first["wandb"]["id"]
    assert second["mlflow"]["run_id"] == first["mlflow"]["run_id"]
    assert max(r["step"] for r in read_metrics(out)) == 6
    assert len(trackers.wandb_runs(out, first["wandb"]["id"])) == 2  # one folder per session


def test_a_missing_tracker_library_stops_the_run_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(MissingDependencyError, match=r"dataflex-rl\[wandb\]"):
        run_training(config(tracking={"backends": ["wandb"]}), out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_tracker_failing_mid_run_warns_once_and_the_run_finishes(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    calls = []

    def log(self, step, metrics):
        calls.append(step)
        if step >= 2:
            raise OSError("disk full")
        return original(self, step, metrics)

    original = backends.TensorBoardBackend.log
    monkeypatch.setattr(backends.TensorBoardBackend, "log", log)
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="tracking: tensorboard failed while logging step 2") as w:
        summary = run_training(config(tracking={"backends": ["tensorboard"]}), steps=3, out_dir=out)
    assert sum("tracking:" in str(x.message) for x in w) == 1
    assert summary["steps"] == 3
    assert max(calls) == 2  # dropped after the failure
    assert [r["step"] for r in read_metrics(out) if r["kind"] == "train"] == [0, 1, 2]
    got = trackers.tensorboard_scalars(out / "tensorboard")
    assert sorted(got["train/reward"]) == [0, 1]
