"""tracking/stores.py and its readers on stores written by the real libraries, in the shapes
users have: an MLflow SQLite store written with MlflowClient (experiments, params, a group
tag, a failed run), TensorBoard folders written by PyTorch's SummaryWriter (a resumed writer's
purge included) and by TensorBoard's own event writer (TF2-style tensor scalars, hparams), and
W&B offline runs (config, group, tags, a resumed session, a failed run, a record spanning
blocks). Then ``report --from-tracker`` on each gives the statistics ``report --from-csv``
gives on the same numbers. (What ``tracking:`` writes is read back in test_tracker.py and
tests/integration/test_harness_compare.py.)"""

from __future__ import annotations

import csv
import sys
import time
import warnings

import pytest

from dataflex_rl.cli import main
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tracking import read_wandb
from dataflex_rl.tracking.runs import FAILED, FINISHED, RUNNING
from dataflex_rl.tracking.stores import parse_source, read_runs
from tests import trackers

#: method -> seed -> final held-out accuracy on two benchmarks; 'dapo' gains 5 points on
#: every seed, so with 6 seeds the exact sign-flip test reaches p = 2/2^6 (a verdict)
SEEDS = range(6)


def final(method: str, seed: int, bench: str) -> float:
    base = {"math": 0.40, "code": 0.30}[bench] + 0.01 * seed
    return round(base + (0.05 if method == "dapo" else 0.0), 4)


def curve(method: str, seed: int, bench: str) -> dict[int, float]:
    """Steps 0, 10, 20: the start is the same for both methods (paired), 20 is final."""
    start = round(final("grpo", seed, bench) - 0.1, 4)
    return {
        0: start,
        10: round((start + final(method, seed, bench)) / 2, 4),
        20: final(method, seed, bench),
    }


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        trackers.offline_env(mp, tmp_path_factory.mktemp("env"))
        yield


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory, offline):
    """Experiment 'rl' holds grpo and dapo x 6 seeds (params method, seed; tag group), a
    failed run and a run of another group; experiment 'scratch' one more run."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow") / "store.db"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        rl = client.create_experiment("rl")
        scratch = client.create_experiment("scratch")

        def add(experiment, name, method, seed, group="sweep", status="FINISHED", twice=False):
            r = client.create_run(experiment, run_name=name, tags={"group": group, "owner": "ana"})
            ms = int(time.time() * 1000)
            metrics = [
                Metric(f"val/{b}/acc", v, ms, s)
                for b in ("math", "code")
                for s, v in curve(method, seed, b).items()
            ] + [Metric("train/loss", 1.0, ms, 0)]
            if twice:  # step 20 logged again later: the newer value counts
                metrics.append(Metric("val/math/acc", 0.99, ms + 5, 20))
            client.log_batch(
                r.info.run_id,
                metrics=metrics,
                params=[Param("method", method), Param("seed", str(seed)), Param("lr", "1e-6")],
            )
            client.set_terminated(r.info.run_id, status)

        for seed in SEEDS:
            for method in ("grpo", "dapo"):
                add(rl, f"{method}-{seed}", method, seed)
        add(rl, "dapo-crashed", "dapo", 9, status="FAILED")
        add(rl, "grpo-other", "grpo", 0, group="other", twice=True)
        add(scratch, "debug", "grpo", 0)
    return db


def test_mlflow_store_written_by_the_client_reads_back(mlflow_store):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        runs = read_runs("mlflow", f"sqlite:///{mlflow_store}", keep=lambda k: k.startswith("val/"))
        only_rl = read_runs("mlflow", str(mlflow_store), experiment="rl")
    by_name = {r.name: r for r in runs}
    assert len(runs) == 15 and len(only_rl) == 14
    r = by_name["dapo-3"]
    assert (r.experiment, r.group, r.status) == ("rl", "sweep", FINISHED)
    assert r.fields["method"] == "dapo" and r.fields["seed"] == "3" and r.fields["owner"] == "ana"
    assert r.metrics == {  # train/loss not loaded (keep)
        "val/math/acc": {0: 0.33, 10: 0.405, 20: 0.48},
        "val/code/acc": {0: 0.23, 10: 0.305, 20: 0.38},
    }
    assert by_name["dapo-crashed"].status == FAILED
    assert by_name["grpo-other"].metrics["val/math/acc"][20] == 0.99
    assert by_name["debug"].experiment == "scratch"


def test_mlflow_refuses_a_missing_store_without_creating_it_and_lists_experiments(
    mlflow_store, tmp_path
):
    missing = tmp_path / "nope.db"
    with pytest.raises(ConfigError, match="no such SQLite database"):
        read_runs("mlflow", f"sqlite:///{missing}")
    assert not missing.exists()
    with pytest.raises(ConfigError, match="no such file or folder"):
        read_runs("mlflow", str(missing))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ConfigError) as e:
            read_runs("mlflow", str(mlflow_store), experiment="lr")
    assert str(e.value).endswith("no experiment 'lr'; experiments: Default, rl, scratch")


@pytest.fixture(scope="module")
def tensorboard_store(tmp_path_factory):
    """``sweep/<method>/seed<s>/`` folders from PyTorch's SummaryWriter (no hyperparameters),
    and ``misc/tf2`` from TensorBoard's own writer with TF2-style scalars and hparams."""
    pytest.importorskip("tensorboard")
    import numpy as np
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.plugins.scalar import metadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("tb")
    for seed in SEEDS:
        for method in ("grpo", "dapo"):
            with SummaryWriter(str(root / "sweep" / method / f"seed{seed}")) as w:
                for b in ("math", "code"):
                    for step, v in curve(method, seed, b).items():
                        w.add_scalar(f"val/{b}/acc", v, step)
    other = EventFileWriter(str(root / "misc" / "tf2"))
    other.add_event(Event(step=0, summary=hp.hparams_pb({"method": "grpo", "seed": 4, "lr": 0.1})))
    meta = metadata.create_summary_metadata(display_name="val/math/acc", description="")
    for step, v in ((0, 0.1), (5, 0.7)):
        value = Summary.Value(
            tag="val/math/acc", metadata=meta, tensor=tensor_util.make_tensor_proto(np.float32(v))
        )
        other.add_event(Event(step=step, summary=Summary(value=[value])))
    other.close()
    return root / "sweep"


def test_tensorboard_folders_read_back_by_path_with_hparams(tensorboard_store, tmp_path):
    runs = {r.name: r for r in read_runs("tensorboard", str(tensorboard_store.parent))}
    assert len(runs) == 13
    assert runs["sweep/dapo/seed3"].metrics == {
        "val/math/acc": {0: 0.33, 10: 0.405, 20: 0.48},  # float32, read as the decimal logged
        "val/code/acc": {0: 0.23, 10: 0.305, 20: 0.38},
    }
    assert runs["sweep/dapo/seed3"].fields == {}
    assert runs["misc/tf2"].fields == {"method": "grpo", "seed": "4", "lr": "0.1"}
    assert runs["misc/tf2"].metrics == {"val/math/acc": {0: 0.1, 5: 0.7}}
    (one,) = read_runs("tensorboard", str(tensorboard_store / "dapo" / "seed3"))
    assert one.name == "seed3"
    with pytest.raises(ConfigError, match="TensorBoard runs have no experiment"):
        read_runs("tensorboard", str(tensorboard_store), experiment="rl")
    with pytest.raises(ConfigError, match="no TensorBoard event files"):
        read_runs("tensorboard", str(tmp_path))


def test_a_resumed_summarywriter_reads_back_without_its_purged_steps(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "run")) as w:
        for step in (0, 10, 20):
            w.add_scalar("val/math/acc", step / 100, step)
    with SummaryWriter(str(tmp_path / "run"), purge_step=10) as w:  # resumed at step 10
        w.add_scalar("val/math/acc", 0.5, 10)
    (run,) = read_runs("tensorboard", str(tmp_path))
    assert run.metrics == {"val/math/acc": {0: 0.0, 10: 0.5}}


#: W&B seeds: wandb.init costs about a second a run, so fewer than the others
WANDB_SEEDS = range(3)


@pytest.fixture(scope="module")
def wandb_store(tmp_path_factory, offline):
    """Offline runs with config method/seed, group and tags; grpo seed 2 stops after step 10
    and a second session (resume="allow") logs step 20; one failed run; one run of another
    project; a config value longer than a 32 KiB block."""
    pytest.importorskip("wandb")
    import wandb

    root = tmp_path_factory.mktemp("wandb")
    settings = wandb.Settings(silent=True, console="off", disable_git=True, x_disable_stats=True)

    def session(method, seed, steps, *, run_id, project="rl", exit_code=0, config=True):
        run = wandb.init(
            project=project,
            name=f"{method}-s{seed}",
            group="sweep",
            id=run_id,
            resume="allow",
            dir=str(root),
            mode="offline",
            config={"method": method, "seed": seed, "optim": {"lr": 1e-6}} if config else None,
            tags=["rlvr", "model:qwen"],
            settings=settings,
            reinit="create_new",
        )
        for step in steps:  # W&B steps only go forward: both benchmarks at once
            run.log(
                {f"val/{b}/acc": curve(method, seed, b)[step] for b in ("math", "code")}, step=step
            )
        run.finish(exit_code=exit_code)

    for seed in WANDB_SEEDS:
        for method in ("grpo", "dapo"):
            steps = (0, 10) if (method, seed) == ("grpo", 2) else (0, 10, 20)
            session(method, seed, steps, run_id=f"{method}{seed}")
    session("grpo", 2, (20,), run_id="grpo2", config=False)  # the resumed session
    session("dapo", 7, (0,), run_id="crashed", exit_code=1)
    run = wandb.init(
        project="other",
        id="big",
        dir=str(root),
        mode="offline",
        settings=settings,
        config={"method": "x", "seed": 0, "notes": "n" * 70_000},
        reinit="create_new",
    )
    run.log({"val/math/acc": 0.5}, step=3)
    run.summary["val/final"] = 0.75
    run.finish()
    return root


def test_wandb_offline_runs_read_back_with_sessions_merged(wandb_store):
    runs = {r.id: r for r in read_runs("wandb", str(wandb_store))}
    assert len(runs) == 8
    r = runs["dapo1"]
    assert (r.name, r.experiment, r.group, r.status) == ("dapo-s1", "rl", "sweep", FINISHED)
    assert r.labels == ("rlvr", "model:qwen")
    assert r.fields == {"method": "dapo", "seed": "1", "optim.lr": "1e-06", "model": "qwen"}
    assert r.metrics == {
        "val/math/acc": {0: 0.31, 10: 0.385, 20: 0.46},
        "val/code/acc": {0: 0.21, 10: 0.285, 20: 0.36},
    }
    # two sessions of one run: the config of the first, the steps of both
    assert runs["grpo2"].fields["method"] == "grpo"
    assert runs["grpo2"].metrics["val/math/acc"] == {0: 0.32, 10: 0.37, 20: 0.42}
    assert runs["crashed"].status == FAILED
    # a record longer than a block reads whole; a summary key never logged has no step
    assert len(runs["big"].fields["notes"]) == 70_000
    assert runs["big"].metrics == {"val/math/acc": {3: 0.5}, "val/final": {None: 0.75}}
    assert [r.id for r in read_runs("wandb", str(wandb_store), experiment="other")] == ["big"]


def test_a_wandb_log_cut_short_keeps_its_whole_records(wandb_store, tmp_path):
    (log,) = read_wandb.sessions(wandb_store)["big"]
    data = log.read_bytes()
    whole = list(read_wandb.chunks(data))
    cut = list(read_wandb.chunks(data[: len(data) - 40]))  # the last record half written
    assert 0 < len(cut) < len(whole) and cut == whole[: len(cut)]
    copy = tmp_path / "run-live.wandb"
    copy.write_bytes(data[: len(data) - 40])
    (live,) = read_runs("wandb", str(copy))
    assert live.status == RUNNING  # no exit record yet
    with pytest.raises(ConfigError, match="not a W&B transaction log"):
        list(read_wandb.chunks(b"hello, world"))


def test_an_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        parse_source("mlfow:x.db")
    assert str(e.value) == (
        "--from-tracker 'mlfow:x.db': expected BACKEND:LOCATION with BACKEND one of mlflow, "
        "tensorboard, wandb; unknown backend 'mlfow'. Did you mean 'mlflow'?"
    )
    with pytest.raises(ConfigError, match="no location after 'wandb:'"):
        parse_source("wandb:")


# ---------------------------------------------------------------- through `report`
def write_csv(path, runs) -> None:
    """The long CSV of ``(method, seed)`` runs: every step of both benchmarks."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seed", "benchmark", "step", "score"])
        for method, seed in runs:
            for b in ("math", "code"):
                for step, v in curve(method, seed, b).items():
                    w.writerow([method, seed, b, step, v])


@pytest.mark.parametrize("backend", ["mlflow", "tensorboard", "wandb"])
def test_report_from_a_tracker_store_gives_the_statistics_of_the_same_csv(
    backend, request, tmp_path, capsys
):
    store = request.getfixturevalue(f"{backend}_store")
    seeds = WANDB_SEEDS if backend == "wandb" else SEEDS
    select = {
        "mlflow": ["--experiment", "rl", "--group", "sweep", "--method-field", "method"],
        "tensorboard": ["--method-field", "name~^(\\w+)/", "--seed-field", "name~seed(\\d+)$"],
        "wandb": ["--experiment", "rl", "--tag", "rlvr", "--method-field", "method"],
    }[backend]
    location = f"sqlite:///{store}" if backend == "mlflow" else str(store)
    write_csv(tmp_path / "same.csv", [(m, s) for s in seeds for m in ("grpo", "dapo")])
    common = ["--baseline", "grpo", "--no-plots", "--n-boot", "500"]
    from_csv = ["report", "--from-csv", str(tmp_path / "same.csv"), "--out", str(tmp_path / "csv")]
    assert main([*from_csv, *common]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        source = f"{backend}:{location}"
        argv = ["report", "--from-tracker", source, "--metrics", "val/*/acc", *select]
        code = main([*argv, "--out", str(tmp_path / "tr"), *common])
    err = capsys.readouterr().err
    assert code == 0, err
    trackers.same_statistics(
        tmp_path / "tr" / "statistics.csv", tmp_path / "csv" / "statistics.csv"
    )
    report = (tmp_path / "tr" / "report.md").read_text()
    assert f"runs of `{backend}:{location}`" in report
    if backend != "wandb":  # 6 seeds of +5 points: decided
        assert "| dapo | 6 |" in report and "| better |" in report
    if backend != "tensorboard":
        assert "skipped 1 run(s) (the tracker marks them failed)" in report


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--from-tracker", "neptune:runs"], "BACKEND one of mlflow, tensorboard, wandb"),
        (["--from-tracker", "wandb:no/such/dir"], "wandb:no/such/dir: no such folder"),
        (["--from-tracker", "mlflow:sqlite:///no/such.db"], "no such SQLite database"),
        (["--from-tracker", "tensorboard:."], "no TensorBoard event files"),
        (["--from-csv", "x.csv", "--group", "g", "--step", "3"], "--group, --step: only with"),
        (["--from-tracker", "wandb:.", "--metrics", "re:("], "--metrics 're:(': not a regular"),
    ],
)
def test_bad_tracker_input_is_one_line(extra, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dataflex-rl: error: ") and expected in err, err
    assert len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written (mlflow created no database)


@pytest.mark.parametrize("backend", ["mlflow", "tensorboard", "wandb"])
def test_a_missing_reader_library_is_refused_naming_the_extra(
    backend, monkeypatch, tmp_path, capsys
):
    monkeypatch.setitem(sys.modules, backend, None)  # how tests block an import
    out = tmp_path / "r"
    assert main(["report", "--from-tracker", f"{backend}:{tmp_path}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f'pip install "dataflex-rl[{backend}]"' in err and f"({backend} stores)" in err
    assert not out.exists()
