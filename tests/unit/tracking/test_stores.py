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
    # finish() can return before W&B's service has written a run's last blocks (a busy
    # machine read 64 KiB of the 70 KB run's log: its config cut short); shutting the service
    # down waits for every log to be written, as a training process's exit does
    wandb.teardown()
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


# ---------------------------------------------------------------- strata of a store (--by)
#: (model, regime, method, seeds) of the runs of experiment 'strata'; regime None: the run has
#: no regime parameter, "": an empty one. llama's grpo runs have regime "" and its dapo runs
#: none: one stratum, as two empty cells are. grpo seeds 0-5 appear in two strata (no clash).
STRATA_RUNS = [
    ("qwen", None, "grpo", SEEDS),
    ("qwen", None, "dapo", SEEDS),
    ("qwen", "long", "static", SEEDS),
    ("qwen", "long", "dapo", SEEDS),
    ("llama", "", "grpo", SEEDS),
    ("llama", None, "dapo", SEEDS),
    ("llama", "long", "grpo", range(3)),  # a single method: listed, not compared
]


def stratum_score(model: str, regime: str | None, method: str, seed: int, bench: str) -> float:
    """dapo gains 5 points on qwen without a regime, loses 5 against static on qwen/long, and
    gains or loses 2 (alternately by seed) on llama: better, worse, undecided."""
    base = {"math": 0.40, "code": 0.30}[bench] + 0.01 * seed - (0.1 if model == "llama" else 0)
    effect = 0.0
    if method == "dapo":
        effect = {"qwen": -0.05 if regime == "long" else 0.05}.get(model, 0.02 * (-1) ** seed)
    return round(base + effect, 4)


@pytest.fixture(scope="module")
def strata_store(tmp_path_factory, offline):
    """Experiment 'strata' (`STRATA_RUNS`: params method, seed, model[, regime], final score
    at step 20); experiment 'dup': grpo seed 0 on qwen twice, once without a regime, once
    with an empty one."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-strata") / "store.db"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        ids = {name: client.create_experiment(name) for name in ("strata", "dup")}

        def add(experiment, name, model, regime, method, seed):
            r = client.create_run(ids[experiment], run_name=name)
            ms = int(time.time() * 1000)
            params = {"method": method, "seed": str(seed), "model": model}
            params |= {} if regime is None else {"regime": regime}
            client.log_batch(
                r.info.run_id,
                metrics=[
                    Metric(f"val/{b}/acc", stratum_score(model, regime, method, seed, b), ms, 20)
                    for b in ("math", "code")
                ],
                params=[Param(k, v) for k, v in params.items()],
            )
            client.set_terminated(r.info.run_id, "FINISHED")

        for model, regime, method, seeds in STRATA_RUNS:
            for seed in seeds:
                add("strata", f"{model}-{regime}-{method}-{seed}", model, regime, method, seed)
        add("dup", "no-regime", "qwen", None, "grpo", 0)
        add("dup", "empty-regime", "qwen", "", "grpo", 0)
    return f"mlflow:sqlite:///{db}"


#: --baseline grpo,static: qwen/long's reference is static, the others' grpo
STRATA_ARGS = ["--method-field", "method", "--metrics", "val/*/acc", "--baseline", "grpo,static"]
FAST = ["--no-plots", "--n-boot", "300"]


def read_rows(path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_report_by_tracker_fields_equals_each_stratum_reported_alone(
    strata_store, tmp_path, capsys
):
    out = tmp_path / "by"
    argv = ["report", "--from-tracker", strata_store, "--experiment", "strata", *STRATA_ARGS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        code = main([*argv, "--by", "model,regime", "--out", str(out), *FAST])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    # strata sorted by their values, an empty value first; folders as for an empty CSV cell
    index = (out / "report.md").read_text()
    assert (
        "| llama | (empty) | grpo | 1 | 6 |" in index
        and "| llama | long | grpo | 0 | — | not compared (see the notes) |" in index
        and "| qwen | (empty) | grpo | 1 | 6 |" in index
        and "| qwen | long | static | 1 | 6 |" in index
    ), index
    assert "note: model=llama, regime=long: not compared, a single method (grpo)" in index
    assert index.index("| llama | (empty) |") < index.index("| llama | long |")
    assert index.index("| llama | long |") < index.index("| qwen | (empty) |")
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "llama_no-regime",
        "qwen_long",
        "qwen_no-regime",
    ]
    assert "== model=llama, regime=(empty) ==" in printed.out
    assert f"from `{strata_store}`" in index  # the source as given, not as a mangled path
    combined = read_rows(out / "statistics.csv")
    assert list(combined[0])[:3] == ["model", "regime", "summary"]
    # the oracle: each stratum's runs filtered by hand, written as a long CSV, reported alone
    # +2/-2 points alternately on llama: mean difference 0, p = 1, no verdict
    want_verdicts = {
        ("llama", ""): "no detectable difference",
        ("qwen", ""): "better",
        ("qwen", "long"): "worse",
    }
    for model, regime, folder in [
        ("llama", "", "llama_no-regime"),
        ("qwen", "", "qwen_no-regime"),
        ("qwen", "long", "qwen_long"),
    ]:
        mine = [
            (m, s, reg)
            for mod, reg, m, seeds in STRATA_RUNS
            if mod == model and (reg or "") == regime
            for s in seeds
        ]
        alone = tmp_path / f"{folder}.csv"
        with alone.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["method", "seed", "benchmark", "step", "score"])
            for m, s, reg in mine:
                for b in ("math", "code"):
                    w.writerow([m, s, b, 20, stratum_score(model, reg, m, s, b)])
        ref = "static" if regime == "long" else "grpo"
        oracle = tmp_path / f"oracle-{folder}"
        argv = ["report", "--from-csv", str(alone), "--baseline", ref, "--out", str(oracle)]
        assert main([*argv, *FAST]) == 0
        trackers.same_statistics(out / folder / "statistics.csv", oracle / "statistics.csv")
        block = [
            {k: v for k, v in r.items() if k not in ("model", "regime")}
            for r in combined
            if (r["model"], r["regime"]) == (model, regime)
        ]
        got = tmp_path / f"block-{folder}.csv"
        with got.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(block[0]))
            w.writeheader()
            w.writerows(block)
        trackers.same_statistics(got, oracle / "statistics.csv")
        average = {r["method"]: r["verdict"] for r in block if r["summary"] == "average"}
        assert average == {ref: "baseline", "dapo": want_verdicts[model, regime]}
    assert {(r["model"], r["regime"]) for r in combined} == {
        ("llama", ""),
        ("qwen", ""),
        ("qwen", "long"),
    }


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            ["--experiment", "strata", "--by", "model,regim"],
            "--by regim: none of the 39 runs used has this field. Did you mean 'regime'? "
            "Their fields: method, mlflow.runName, model, regime, seed, name, id, group, "
            "experiment",
        ),
        (
            ["--experiment", "dup", "--by", "model,regime"],
            "mlflow run 'no-regime' (id ",
        ),
    ],
)
def test_a_by_field_no_run_has_and_two_runs_of_one_stratum_are_one_line_errors(
    strata_store, extra, expected, tmp_path, capsys
):
    out = tmp_path / "r"
    argv = ["report", "--from-tracker", strata_store, *STRATA_ARGS, *extra, "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dataflex-rl: error: {expected}"), err
    assert len(err.strip().splitlines()) == 1
    if "dup" in extra:
        assert "and mlflow run 'empty-regime' (id " in err
        assert "are both method 'grpo' seed 0 on benchmark " in err
        assert " in stratum model=qwen, regime=(empty); " in err
    assert not out.exists()
