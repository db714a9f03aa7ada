"""Executors: where the runs of a matrix execute (``compare --executor local|ray``).

`LocalExecutor` runs a bounded number at a time here (supervisor.py), ``RayExecutor``
(ray_executor.py) each as a Ray task. An executor is a context manager; ``start(out_dir)``
checks before any run, ``run(jobs, work, launch, progress)`` returns the records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.launch import Launch
from dataflex_rl.harness.running.supervisor import (
    Progress,
    default_workers,
    run_processes,
    supervise,
)


# ------------------------------------------------------------------------------- local
def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES`` when set (its entries,
    indices or UUIDs), else every device torch counts (none without CUDA)."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001  (no usable CUDA: no GPU to hand out)
        return []


def device_sets(visible: Sequence[str], gpus_per_run: float) -> list[str]:
    """Disjoint ``CUDA_VISIBLE_DEVICES`` values of ``gpus_per_run`` GPUs each (``["0,1",
    "2,3"]`` for 4 at 2); ConfigError on a fraction or more than are visible."""
    if gpus_per_run != int(gpus_per_run):
        raise ConfigError(
            f"resources.gpus_per_run: the local executor gives whole GPUs, got {gpus_per_run:g} "
            "(fractions share a GPU on --executor ray)"
        )
    k = int(gpus_per_run)
    if k > len(visible):
        raise ConfigError(
            f"resources.gpus_per_run: {k} GPU(s) per run, but this machine shows "
            f"{len(visible)} ({', '.join(visible) or 'none'}; CUDA_VISIBLE_DEVICES or "
            "torch.cuda.device_count())"
        )
    return [",".join(visible[i : i + k]) for i in range(0, len(visible) - k + 1, k)]


def thread_env(workers: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """OpenMP/MKL threads = cores // workers (at least 1) for one of ``workers`` runs here;
    nothing when ``env`` sets ``OMP_NUM_THREADS``. Without it two TRL runs on 2 cores took
    ~10x the CPU per step (benchmarks/cross_host.py)."""
    env = os.environ if env is None else env
    if "OMP_NUM_THREADS" in env:
        return {}
    threads = str(max(1, default_workers() // max(1, workers)))
    return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


@dataclass
class LocalExecutor:
    """Runs on this machine; ``workers`` None: one per ``cpus_per_run`` cores, at most one per
    device set (`device_sets` of ``gpus_per_run``)."""

    workers: int | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    name: str = "local"

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def start(self, out_dir: Path) -> None:
        """Checks before any run (nothing to check for local processes but the GPUs)."""
        self.device_envs()

    def device_envs(self) -> list[dict[str, str]] | None:
        """One ``CUDA_VISIBLE_DEVICES`` per device set (None: no GPUs asked for)."""
        if not self.gpus_per_run:
            return None
        return [{"CUDA_VISIBLE_DEVICES": d} for d in device_sets(visible_gpus(), self.gpus_per_run)]

    def worker_envs(self, workers: int) -> list[dict[str, str]]:
        """What each of ``workers`` worker processes adds to its environment: its devices
        (`device_envs`) and its threads (`thread_env`)."""
        devices = self.device_envs() or [{}] * workers
        return [{**d, **thread_env(workers)} for d in devices[:workers]]

    def slots(self, jobs: int) -> int:
        """Worker processes for ``jobs`` runs."""
        envs = self.device_envs()
        n = self.workers or max(1, int(default_workers() // self.cpus_per_run))
        if envs is not None:
            n = min(n, len(envs))
        return max(1, min(n, jobs))

    def where(self, jobs: int) -> str:
        return f"{self.slots(jobs)} workers"

    def run(
        self,
        jobs: list,
        work: Callable[[Any], dict],
        launch: Callable[[Any], Launch],
        progress: Progress,
    ) -> list[dict]:
        """Every job: ``launch(job)`` as a process of its own when a job has its own Python
        (``job.python``: a host's), else ``work(job)`` in-process in the worker processes."""
        n = self.slots(len(jobs))
        if any(getattr(j, "python", None) is not None for j in jobs):
            return run_processes(jobs, launch, n, progress, self.worker_envs(n))
        return supervise(jobs, work, n, progress, self.worker_envs(n))


def make_executor(
    name: str,
    resources,
    *,
    workers: int | None = None,
    address: str | None = None,
    purpose: str = "dataflex-rl compare",
):
    """The executor ``name`` ("local" or "ray") with the experiment's ``resources``."""
    if name == "local":
        if address is not None:
            raise ConfigError("--address names a Ray cluster: it goes with --executor ray")
        if resources.custom:
            print(
                "note: resources.custom "
                f"({', '.join(resources.custom)}) is scheduled by --executor ray only; "
                "the local executor ignores it"
            )
        return LocalExecutor(workers, resources.cpus_per_run, resources.gpus_per_run)
    if name != "ray":
        raise ConfigError(f"executor: must be one of 'local', 'ray', got {name!r}")
    from dataflex_rl.deps import require

    require("ray", f"{purpose} --executor ray")
    from dataflex_rl.harness.running.ray_executor import RayExecutor

    return RayExecutor(
        address=address,
        cpus_per_run=resources.cpus_per_run,
        gpus_per_run=resources.gpus_per_run,
        custom=dict(resources.custom),
        max_in_flight=workers,
    )
