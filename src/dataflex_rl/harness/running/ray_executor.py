"""``compare --executor ray``: each run is a Ray task on a cluster (the harness's one module
that imports ray, lazily; the ``ray`` extra).

Each task holds the run's resources and starts its `Launch` as a child process that dies with
the task's worker; the local executor's guarantees hold (docs/cluster.md). The connection lives
while the executor is entered; one already opened by ``ray.init`` is used and left open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.launch import Launch, run_launch
from dataflex_rl.harness.running.supervisor import (
    POLL_SECONDS,
    Progress,
    failure_record,
    sigterm_raises,
)

#: seconds a plainly cancelled task has to stop before it is cancelled by force
GRACE_SECONDS = 5.0
#: seconds every node has to answer the storage check
PROBE_SECONDS = 120.0
#: Ray's errors for a task whose worker process or node died: raised once its one retry
#: (``max_retries=1``) was lost too
LOST = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError")
LOST_NOTE = (
    "lost twice, its worker or node died: Ray retried it once; rerun compare to continue it "
    "from its last checkpoint"
)


def run_task(launch: Launch):
    """The Ray task of one run (a streaming generator): ``("started", node id)``, then
    ``("record", record)``. The run gets this cluster's ``RAY_ADDRESS`` (verl can join it)."""
    import ray

    context = ray.get_runtime_context()
    env = {"RAY_ADDRESS": context.gcs_address, **launch.env}
    yield ("started", context.get_node_id())
    yield ("record", run_launch(dataclasses.replace(launch, env=env)))


def probe_storage(path: str, token: str) -> str:
    """On a node: "" when ``path`` holds ``token`` and a file can be written beside it, else
    what went wrong."""
    try:
        if Path(path).read_text() != token:
            return f"{path} holds something else"
        mine = Path(f"{path}.{os.getpid()}")
        mine.write_text(token)
        mine.unlink()
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return ""


def fits(node_resources: dict[str, float], request: dict[str, float]) -> bool:
    """Whether a node with these total resources can hold one run's ``request``."""
    return all(node_resources.get(k, 0.0) >= v for k, v in request.items() if v > 0)


@dataclass
class RayExecutor:
    """Runs as Ray tasks; ``address`` None: ``RAY_ADDRESS`` if set, else a local cluster;
    ``max_in_flight``: tasks submitted at once (None: all)."""

    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)
    max_in_flight: int | None = None
    name: str = "ray"
    owns: bool = field(default=False, init=False)

    @property
    def request(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_run, "GPU": self.gpus_per_run, **self.custom}

    def __enter__(self) -> RayExecutor:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self.address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self.owns = True
        return self

    def __exit__(self, *exc) -> None:
        import ray

        if self.owns:
            ray.shutdown()
            self.owns = False

    def nodes(self) -> list[dict]:
        """The alive nodes that can hold one run."""
        import ray

        return [n for n in ray.nodes() if n.get("Alive") and fits(n["Resources"], self.request)]

    def slots(self, jobs: int) -> int:
        """Runs the cluster can hold at once (at most ``jobs``)."""
        n = 0
        for node in self.nodes():
            r = node["Resources"]
            n += int(min(r.get(k, 0.0) // v for k, v in self.request.items() if v > 0))
        if self.max_in_flight:
            n = min(n, self.max_in_flight)
        return max(1, min(n, jobs))

    def where(self, jobs: int) -> str:
        return f"ray: {len(self.nodes())} node(s), {self.slots(jobs)} at once"

    def start(self, out_dir: Path) -> None:
        """Refuse before any run when no node can hold a run, or when a node that can does
        not see ``out_dir`` (see the module docstring)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = self.nodes()
        if not nodes:
            offered = "; ".join(
                ", ".join(f"{k} {v:g}" for k, v in sorted(n["Resources"].items()) if "." not in k)
                for n in ray.nodes()
                if n.get("Alive")
            )
            asked = ", ".join(f"{k} {v:g}" for k, v in self.request.items() if v > 0)
            raise ConfigError(
                f"resources: no node of the Ray cluster can hold one run ({asked}); the nodes "
                f"offer: {offered or 'nothing'}"
            )
        out = Path(out_dir).resolve()
        token = secrets.token_hex(8)
        check = out / f".storage-check-{token}"
        try:
            out.mkdir(parents=True, exist_ok=True)
            check.write_text(token)
        except OSError as e:
            raise ConfigError(f"--out {out}: cannot be written here ({e})") from e
        try:
            probe = ray.remote(probe_storage)
            refs = [
                probe.options(
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                ).remote(str(check), token)
                for n in nodes
            ]
            try:
                answers = ray.get(refs, timeout=PROBE_SECONDS)
            except ray.exceptions.GetTimeoutError:
                answers = ["did not answer"] * len(nodes)
        finally:
            check.unlink(missing_ok=True)
        # a node by its address and the start of its id (nodes may share an address)
        bad = [
            f"{n['NodeManagerAddress']} (node {n['NodeID'][:12]}): {a}"
            for n, a in zip(nodes, answers)
            if a
        ]
        if bad:
            raise ConfigError(
                f"--out {out}: not on storage every node sees: {'; '.join(bad)}. Put --out on "
                "a filesystem mounted at the same path on every node (NFS, Lustre, ...); a "
                "run's folder must be readable wherever it resumes (docs/cluster.md)"
            )

    def run(self, jobs: list, work, launch, progress: Progress) -> list[dict]:
        """Each job's `Launch` as a Ray task; the records in the order the runs finish."""
        import ray

        task = ray.remote(run_task)
        options = {"num_cpus": self.cpus_per_run, "num_gpus": self.gpus_per_run}
        options.update(resources=self.custom or None, num_returns="streaming", max_retries=1)
        options["retry_exceptions"] = False
        progress.running = list(jobs)
        queue, live, started, results = list(jobs), {}, set(), []
        with sigterm_raises():
            try:
                while queue or live:
                    while queue and (not self.max_in_flight or len(live) < self.max_in_flight):
                        job = queue.pop(0)
                        name = f"{job.method}-seed{job.seed}"
                        gen = task.options(name=name, **options).remote(launch(job))
                        live[gen] = job
                    ready, _ = ray.wait(list(live), num_returns=1, timeout=POLL_SECONDS)
                    for gen in ready:
                        record = self._next(gen, live[gen], started)
                        if record is not None:
                            del live[gen]
                            started.discard(gen)
                            results.append(record)
                            progress.results.append(record)
                    progress.active = len(started)
                    progress.refresh()
            except BaseException:  # Ctrl-C, SIGTERM: no task of this call may go on
                cancel(list(live))
                raise
        return results

    @staticmethod
    def _next(gen, job, started: set) -> dict | None:
        """The next event of a task: None when it only started, else the run's record (a
        failure record when the task itself failed)."""
        import ray

        try:
            kind, value = ray.get(next(gen))
        except StopIteration:
            return failure_record(job, RuntimeError("the task ended without a record"))
        except ray.exceptions.RayError as e:  # the worker or node died (after Ray's retry)
            record = failure_record(job, e)
            if type(e).__name__ in LOST:
                record["error"] += f" ({LOST_NOTE})"
            return record
        if kind == "started":
            started.add(gen)
            return None
        return value


def cancel(gens: list, grace: float = GRACE_SECONDS) -> None:
    """Cancel tasks: plainly (each kills its run's process group), then by force those still
    running after ``grace`` seconds."""
    import ray

    if not gens:
        return
    for gen in gens:
        with contextlib.suppress(Exception):
            ray.cancel(gen)
    with contextlib.suppress(Exception):
        ray.wait(gens, num_returns=len(gens), timeout=grace)
    for gen in gens:
        with contextlib.suppress(Exception):
            ray.cancel(gen, force=True)
