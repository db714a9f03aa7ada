"""`Tracker`: what each backend receives (fresh, resumed, added on resume), failures that warn
once and never reach the run, and missing libraries named before any work. Then each real
tracker, offline, read back with its own reader."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from dataflex_rl.core.config import validate
from dataflex_rl.deps import MissingDependencyError
from dataflex_rl.tracking import STATE_FILE, Tracker, TrackingConfig, require_backends
from dataflex_rl.tracking import backends as B
from dataflex_rl.tracking.stores import read_runs
from tests import trackers


class Recorder(B.Backend):
    """An in-memory backend: records every call; ``fail_at`` makes ``log`` raise there."""

    name = "wandb"
    calls: list = []  # replaced per test
    fail_at: int | None = None

    def open(self, params, tags, state, first_step):
        self.calls.append(("open", state, first_step))
        return {"id": "r1"}

    def log(self, step, metrics):
        if step == self.fail_at:
            raise RuntimeError("connection lost")
        self.calls.append(("log", step, dict(metrics)))

    def log_files(self, step, images, files):
        self.calls.append(("files", step, [p.name for p in images]))

    def close(self, failed):
        self.calls.append(("close", failed))


class PurgingRecorder(Recorder):
    name = "tensorboard"
    purges = True
    fail_at = None


@pytest.fixture
def fakes(monkeypatch):
    """Both fakes installed under the names 'wandb' (skips) and 'tensorboard' (purges)."""
    calls = {"wandb": [], "tensorboard": []}
    monkeypatch.setattr(Recorder, "calls", calls["wandb"])
    monkeypatch.setattr(PurgingRecorder, "calls", calls["tensorboard"])
    monkeypatch.setitem(B.BACKEND_CLASSES, "wandb", Recorder)
    monkeypatch.setitem(B.BACKEND_CLASSES, "tensorboard", PurgingRecorder)
    return calls


def logs(calls):
    return [(c[1], c[2]) for c in calls if c[0] == "log"]


CFG = TrackingConfig(backends=["wandb", "tensorboard"])


def start(tmp_path, **kw):
    return Tracker.start(CFG, tmp_path, params={"seed": 1}, tags={"seed": "1"}, **kw)


def test_no_backends_no_files_no_calls(tmp_path):
    t = Tracker.start(TrackingConfig(), tmp_path, params={}, tags={})
    t.log("train", 0, {"a": 1.0})
    t.log_files(images=[tmp_path / "x.png"])
    t.close()
    assert not (tmp_path / STATE_FILE).exists()


def test_records_reach_every_backend_as_finite_numbers(tmp_path, fakes):
    with start(tmp_path) as t:
        t.log("eval", 0, {"eval/x": 0.5})
        t.log("train", 0, {"a": 1, "b": float("nan"), "flag": True, "name": "s"})
        t.log_files(images=[tmp_path / "p.png"])
    for calls in fakes.values():
        assert logs(calls) == [(0, {"eval/x": 0.5}), (0, {"a": 1.0})]
        assert calls[0] == ("open", None, 0)
        assert calls[-2:] == [("files", 0, ["p.png"]), ("close", False)]
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["wandb"] == {"id": "r1"} and state["logged"] == {"eval": 0, "train": 0}


def test_resume_skips_held_steps_purges_tensorboard_and_fills_a_new_backend(tmp_path, fakes):
    with Tracker.start(
        TrackingConfig(backends=["wandb"]), tmp_path, params={}, tags={}
    ) as t:  # the first session had W&B only, and logged train steps 0..4, evals 0 and 2
        for s in range(5):
            if s in (0, 2):
                t.log("eval", s, {"e": s})
            t.log("train", s, {"m": s})
    fakes["wandb"].clear()
    # the resumed session restarts at checkpoint 3: metrics.jsonl kept train 0..2 and evals
    # 0, 2; it recomputes train 3 and 4 (W&B holds them), then trains on to 5
    history = [
        {"kind": "eval", "step": 0, "e": 0},
        {"kind": "train", "step": 0, "m": 0},
        {"kind": "train", "step": 1, "m": 1},
        {"kind": "eval", "step": 2, "e": 2},
        {"kind": "train", "step": 2, "m": 2},
    ]
    with start(tmp_path, first_step=3, history=history, logged={"train": 4, "eval": 2}) as t:
        for s in (3, 4, 5):
            t.log("train", s, {"m": s})
    # W&B continued its run: nothing resent, the held steps 3 and 4 skipped
    assert fakes["wandb"][0] == ("open", {"id": "r1"}, 3)
    assert logs(fakes["wandb"]) == [(5, {"m": 5.0})]
    # TensorBoard is new to this run: it first receives the kept history, then 3, 4, 5
    assert fakes["tensorboard"][0] == ("open", None, 3)
    assert [s for s, _ in logs(fakes["tensorboard"])] == [0, 0, 1, 2, 2, 3, 4, 5]


def test_a_continued_purging_backend_gets_the_kept_records_from_the_resume_step_on(tmp_path, fakes):
    with start(tmp_path) as t:
        t.log("train", 0, {"m": 0})
    fakes["tensorboard"].clear()
    history = [{"kind": "train", "step": 0, "m": 0}, {"kind": "eval", "step": 1, "e": 1}]
    with start(tmp_path, first_step=1, history=history, logged={"train": 1}) as t:
        t.log("train", 1, {"m": 1})
    # the eval at the resume step survives in metrics.jsonl but TensorBoard purged it
    assert logs(fakes["tensorboard"]) == [(1, {"e": 1.0}), (1, {"m": 1.0})]


def test_a_failing_backend_warns_once_and_the_others_go_on(tmp_path, fakes, monkeypatch):
    monkeypatch.setattr(Recorder, "fail_at", 1)
    with pytest.warns(UserWarning) as caught:
        with start(tmp_path) as t:
            for s in range(4):
                t.log("train", s, {"m": s})
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1
    assert "tracking: wandb failed while logging step 1 (RuntimeError: connection lost)" in msgs[0]
    assert [s for s, _ in logs(fakes["wandb"])] == [0]
    assert fakes["wandb"][-1] == ("close", True)  # closed as failed when dropped
    assert [s for s, _ in logs(fakes["tensorboard"])] == [0, 1, 2, 3]


def test_a_backend_that_cannot_open_is_dropped_with_a_warning(tmp_path, fakes, monkeypatch):
    def refuse(self, *a):
        raise PermissionError("read-only folder")

    monkeypatch.setattr(PurgingRecorder, "open", refuse)
    with pytest.warns(UserWarning, match="tensorboard failed while opening"):
        t = start(tmp_path)
    t.log("train", 0, {"m": 0})
    t.close()
    assert logs(fakes["wandb"]) == [(0, {"m": 0.0})]
    assert "tensorboard" not in json.loads((tmp_path / STATE_FILE).read_text())


def test_the_run_raising_closes_the_tracker_runs_as_failed(tmp_path, fakes):
    with pytest.raises(KeyboardInterrupt):
        with start(tmp_path) as t:
            t.log("train", 0, {"m": 0})
            raise KeyboardInterrupt
    assert fakes["wandb"][-1] == ("close", True)


@pytest.mark.parametrize(
    ("backend", "extra"),
    [("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")],
)
def test_a_missing_library_is_named_with_its_extra(monkeypatch, backend, extra):
    monkeypatch.setitem(sys.modules, backend, None)
    with pytest.raises(MissingDependencyError, match=rf"'{backend}'.*dataflex-rl\[{extra}\]"):
        require_backends(TrackingConfig(backends=[backend]), "a test")


def test_the_default_mlflow_store_needs_sqlalchemy(monkeypatch):
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    with pytest.raises(MissingDependencyError, match=r"SQLite store.*dataflex-rl\[mlflow\]"):
        require_backends(TrackingConfig(backends=["mlflow"]), "a test")
    # a tracking server needs no local database
    server = validate(
        TrackingConfig, {"backends": ["mlflow"], "mlflow": {"tracking_uri": "http://h:5000"}}, "t"
    )
    monkeypatch.setitem(sys.modules, "mlflow", object())
    require_backends(server, "a test")


# ---------------------------------------------------------------- the real trackers, offline
RECORDS = [("eval", 0, {"eval/mean/greedy": 0.25})] + [
    ("train", s, {"train/reward": s / 4, "dataflex/kept_response_fraction": 1 - s / 8})
    for s in range(4)
]


def two_sessions(tmp_path, backend: str) -> dict:
    """Session 1 logs every record; session 2 resumes at step 2 (steps 2 and 3 recomputed),
    then logs step 4. Returns tracking.json."""
    cfg = TrackingConfig(backends=[backend], project="unit", run_name="r")
    with Tracker.start(
        cfg,
        tmp_path,
        params={"seed": 7, "strategy.name": "maxvar"},
        tags={"strategy": "maxvar", "seed": "7"},
    ) as t:
        for kind, step, m in RECORDS:
            t.log(kind, step, m)
    kept = [{"kind": k, "step": s, **m} for k, s, m in RECORDS if s < 2]
    with Tracker.start(
        cfg,
        tmp_path,
        params={"seed": 7},
        tags={},
        first_step=2,
        history=kept,
        logged={"train": 3, "eval": 0},
    ) as t:
        for kind, step, m in RECORDS[3:] + [("train", 4, {"train/reward": 1.0})]:
            t.log(kind, step, m)
    return json.loads((tmp_path / STATE_FILE).read_text())


WANT = {
    "eval/mean/greedy": {0: 0.25},
    "train/reward": {0: 0.0, 1: 0.25, 2: 0.5, 3: 0.75, 4: 1.0},
    "dataflex/kept_response_fraction": {0: 1.0, 1: 0.875, 2: 0.75, 3: 0.625},
}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    trackers.offline_env(monkeypatch, tmp_path)


def test_tensorboard_event_files_read_back(tmp_path, offline):
    pytest.importorskip("tensorboard")
    state = two_sessions(tmp_path, "tensorboard")
    assert state["tensorboard"]["dir"] == str(tmp_path / "tensorboard")
    assert trackers.tensorboard_scalars(tmp_path / "tensorboard") == WANT
    (run,) = read_runs("tensorboard", str(tmp_path))  # what `report --from-tracker` reads
    assert run.metrics == WANT
    assert run.fields["strategy"] == "maxvar" and run.fields["seed"] == "7"


def test_wandb_offline_run_reads_back_one_row_per_step(tmp_path, offline):
    pytest.importorskip("wandb")
    state = two_sessions(tmp_path, "wandb")
    rows = trackers.wandb_history(tmp_path, state["wandb"]["id"])
    assert [s for s, _ in rows] == [0, 1, 2, 3, 4]  # the resumed session skipped 2 and 3
    got: dict = {}
    for step, values in rows:
        for k, v in values.items():
            got.setdefault(k, {})[step] = v
    assert got == WANT
    assert trackers.wandb_config(tmp_path, state["wandb"]["id"])["seed"] == 7
    assert sorted(trackers.wandb_tags(tmp_path, state["wandb"]["id"])) == [
        "seed:7",
        "strategy:maxvar",
    ]
    (run,) = read_runs("wandb", str(tmp_path))  # what `report --from-tracker` reads
    assert (run.id, run.name, run.experiment) == (state["wandb"]["id"], "r", "unit")
    assert run.metrics == WANT and run.status == "finished"
    assert run.fields["strategy"] == "maxvar" and run.fields["seed"] == "7"


def test_mlflow_sqlite_store_reads_back_one_point_per_step(tmp_path, offline):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # SQLAlchemy's, inside MLflow
        state = two_sessions(tmp_path, "mlflow")
        client = trackers.mlflow_client(state["mlflow"]["tracking_uri"])
        run = client.get_run(state["mlflow"]["run_id"])
        got = {
            k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)}
            for k in WANT
        }
        points = len(client.get_metric_history(run.info.run_id, "train/reward"))
        (back,) = read_runs("mlflow", state["mlflow"]["tracking_uri"])  # `report --from-tracker`
    assert state["mlflow"]["tracking_uri"] == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert got == WANT and points == 5
    assert run.info.status == "FINISHED" and run.info.run_name == "r"
    assert run.data.params == {"seed": "7", "strategy.name": "maxvar"}
    assert run.data.tags["strategy"] == "maxvar"
    assert back.metrics == WANT and back.status == "finished" and back.experiment == "unit"
    assert back.fields["strategy"] == "maxvar" and back.fields["seed"] == "7"
