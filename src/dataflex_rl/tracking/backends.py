"""One class per experiment tracker: TensorBoard, Weights & Biases, MLflow.

Each imports its library only in ``open``, which starts or continues the tracker run and returns
what a resume needs (W&B or MLflow run id); `tracker.Tracker` catches their failures.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from dataflex_rl.tracking.config import TrackingConfig

#: characters MLflow accepts in metric, parameter and tag names (others become '_')
_MLFLOW_UNSAFE = re.compile(r"[^\w\-. /:]")


class Backend:
    """A tracker run: ``open``, then ``log`` per record, ``log_files`` and ``close`` at the end;
    ``run_dir`` is the default home of local stores."""

    name: ClassVar[str] = ""
    #: a continued run drops its own events at steps >= the first step logged again
    #: (TensorBoard's purge); the others skip the steps they already hold
    purges: ClassVar[bool] = False

    def __init__(self, config: TrackingConfig, run_dir: Path, run_name: str) -> None:
        self.config = config
        self.run_dir = run_dir
        self.run_name = run_name

    def open(
        self, params: dict[str, Any], tags: dict[str, str], state: dict | None, first_step: int
    ) -> dict:
        """Start a tracker run (``state`` None) or continue the one ``state`` describes, whose
        records from ``first_step`` on are logged again. Returns the state to save."""
        raise NotImplementedError

    def log(self, step: int, metrics: dict[str, float]) -> None:
        raise NotImplementedError

    def log_files(self, step: int, images: Sequence[Path], files: Sequence[Path]) -> None:
        """Plots as images, other files (summaries, reports) as artifacts."""
        raise NotImplementedError

    def close(self, failed: bool) -> None:
        raise NotImplementedError


class TensorBoardBackend(Backend):
    """Event files written by ``torch.utils.tensorboard.SummaryWriter``: scalars under their
    metric names, the parameters as a text table and as hyperparameters, plots as images."""

    name = "tensorboard"
    purges = True

    @property
    def log_dir(self) -> Path:
        d = self.config.tensorboard.dir
        return Path(d) / self.run_name if d else self.run_dir / "tensorboard"

    def open(self, params, tags, state, first_step):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.writer = SummaryWriter(
            str(self.log_dir), purge_step=first_step if state else None, flush_secs=30
        )
        if state is None:
            table = {**tags, **params}
            rows = "\n".join(f"| {k} | {v} |" for k, v in table.items())
            self.writer.add_text("params", f"| key | value |\n|---|---|\n{rows}", 0)
            for summary in hparams({k: _scalar(v) for k, v in table.items()}, {}):
                self.writer.file_writer.add_summary(summary)
        return {"dir": str(self.log_dir)}

    def log(self, step, metrics):
        from tensorboard.compat.proto.summary_pb2 import Summary

        # one event per record (add_scalar writes one per value: ~20x slower for a step)
        values = [Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
        self.writer.file_writer.add_summary(Summary(value=values), step)

    def log_files(self, step, images, files):
        import numpy as np
        from PIL import Image

        for path in images:
            with Image.open(path) as im:
                pixels = np.asarray(im.convert("RGB"))
            self.writer.add_image(f"plots/{path.stem}", pixels, step, dataformats="HWC")

    def close(self, failed):
        self.writer.close()


class WandbBackend(Backend):
    """A W&B run (offline by default: a local folder for ``wandb sync``). Continuing a run
    reuses its id with ``resume="allow"``; plots are logged as ``wandb.Image`` and files
    saved with the run (copied into its folder)."""

    name = "wandb"

    def open(self, params, tags, state, first_step):
        import wandb

        c = self.config
        run_id = state["id"] if state else secrets.token_hex(4)
        folder = Path(c.wandb.dir) if c.wandb.dir else self.run_dir
        folder.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            silent=True,
            console="off",
            disable_git=True,
            save_code=False,
            disable_job_creation=True,
            x_disable_stats=True,
            x_disable_meta=True,
            x_save_requirements=False,
        )
        self.run = wandb.init(
            project=c.project,
            entity=c.wandb.entity,
            name=self.run_name,
            group=c.group,
            id=run_id,
            resume="allow",
            dir=str(folder),
            mode=c.wandb.mode,
            config=None if state else params,
            tags=[f"{k}:{v}"[:64] for k, v in tags.items()],
            settings=settings,
            reinit="create_new",
        )
        return {"id": run_id, "dir": str(folder)}

    def log(self, step, metrics):
        self.run.log(metrics, step=step)

    def log_files(self, step, images, files):
        import wandb

        if images:
            self.run.log({f"plots/{p.stem}": wandb.Image(str(p)) for p in images}, step=step)
        for path in files:  # a copy in the run's folder (W&B would link to the original)
            copy = Path(self.run.dir) / path.name
            shutil.copyfile(path, copy)
            self.run.save(str(copy), base_path=self.run.dir, policy="now")

    def close(self, failed):
        self.run.finish(exit_code=1 if failed else 0)


class MlflowBackend(Backend):
    """An MLflow run in a local SQLite store under the run folder by default (MLflow 3 refuses
    new file stores unless ``MLFLOW_ALLOW_FILE_STORE=true``), or in ``mlflow.tracking_uri``.
    A resumed run continues the saved run id; plots go to the ``plots/`` artifacts. Metrics
    are written by MLflow's asynchronous queue (a process killed outright loses what is still
    queued, typically the last step)."""

    name = "mlflow"

    @property
    def tracking_uri(self) -> str:
        uri = self.config.mlflow.tracking_uri
        return uri or f"sqlite:///{(self.run_dir / 'mlflow.db').resolve()}"

    def open(self, params, tags, state, first_step):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = self.tracking_uri
        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=uri)
        self.pending: list = []
        if state and state.get("tracking_uri") == uri:
            self.run_id = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return state
        experiment_id = experiment_of(self.client, self.config, uri)
        all_tags = {**tags, "group": self.config.group} if self.config.group else tags
        run = self.client.create_run(
            experiment_id,
            run_name=self.run_name,
            tags={_mlflow_key(k): str(v)[:5000] for k, v in all_tags.items()},
        )
        self.run_id = run.info.run_id
        items = [Param(_mlflow_key(k), str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        return {"run_id": self.run_id, "tracking_uri": uri, "experiment_id": experiment_id}

    def log(self, step, metrics):
        from mlflow.entities import Metric

        ms = int(time.time() * 1000)
        batch = [Metric(_mlflow_key(k), v, ms, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):  # MLflow takes at most 1000 metrics per batch
            # MLflow's own queue writes them from a thread: a SQLite commit of a step's ~60
            # metrics costs ~60 ms, off the training step this way; errors surface in `wait`
            self.pending.append(
                self.client.log_batch(self.run_id, metrics=batch[i : i + 1000], synchronous=False)
            )
        if len(self.pending) > 64:
            self.wait()

    def wait(self) -> None:
        """Until every queued batch is written (raises the first write's error)."""
        pending, self.pending = self.pending, []
        for op in pending:
            op.wait()

    def log_files(self, step, images, files):
        self.wait()
        for path in images:
            self.client.log_artifact(self.run_id, str(path), "plots")
        for path in files:
            self.client.log_artifact(self.run_id, str(path))

    def close(self, failed):
        try:
            self.wait()
        finally:
            self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


def experiment_of(client: Any, config: TrackingConfig, uri: str) -> str:
    """The id of the MLflow experiment named ``mlflow.experiment`` (default the project),
    created if missing; in a SQLite store its artifacts go next to the database (not under the
    current directory, MLflow's default)."""
    name = config.mlflow.experiment or config.project
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except Exception:  # noqa: BLE001  (another process created it first)
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def _mlflow_key(key: str) -> str:
    return _MLFLOW_UNSAFE.sub("_", key)


def _scalar(value: Any) -> Any:
    """A hyperparameter value TensorBoard accepts (number, string or bool)."""
    return value if isinstance(value, (int, float, str, bool)) else str(value)


#: backend name -> class
BACKEND_CLASSES: dict[str, type[Backend]] = {
    b.name: b for b in (TensorBoardBackend, WandbBackend, MlflowBackend)
}
