"""Process supervision: the runs of one machine, stopped together, never orphaned.

`run_processes` starts each job as a process of its own (hosts with their own Python);
`supervise` runs in-process jobs (hosts without a Python of their own, e.g. the engine) in a
shared pool of spawned workers (imports paid once per worker; jobs of a dying worker retried
once, each alone). Both return records in finishing order and feed one `Progress` bar. Ctrl-C
or SIGTERM kills every run and re-raises.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dataflex_rl.harness.running.launch import Launch, failed_record, run_launch

#: how long the supervisor waits for a job to finish before it refreshes the progress bar
POLL_SECONDS = 1.0
PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """One worker per core available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class Progress:
    """One overall bar in steps over ``total`` jobs of ``steps`` steps each, ``finished`` of
    them done before any starts; ``steps_done(job)`` is read on every refresh. ``active`` (set
    by an executor that knows; None: unfinished jobs, at most ``workers``) shows as ``running=``.
    """

    def __init__(
        self,
        total: int,
        finished: int,
        steps: int,
        steps_done: Callable[[Any], int],
        workers: int,
        show: bool,
        desc: str = "compare",
        where: str | None = None,
    ) -> None:
        self.steps = max(1, steps)
        self.workers = workers
        self.active: int | None = None
        self.base = finished * self.steps
        self.steps_done = steps_done
        self.running: list[Any] = []
        self.results: list[dict] = []
        self.bar = None
        if show:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.steps * total,
                initial=self.base,
                unit="step",
                dynamic_ncols=True,
                desc=f"{desc} ({total} runs, {where or f'{workers} workers'})",
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.refresh()
            self.bar.close()

    def count(self) -> int:
        """Steps done over the matrix: the finished jobs' and each started job's own count."""
        return self.base + sum(min(self.steps, self.steps_done(j)) for j in self.running)

    def refresh(self) -> None:
        if self.bar is None:
            return
        self.bar.update(max(0, min(self.count(), self.bar.total) - self.bar.n))
        self.bar.set_postfix(
            done=sum(r["status"] == "done" for r in self.results),
            failed=sum(r["status"] == "failed" for r in self.results),
            running=self.running_now(),
        )

    def running_now(self) -> int:
        """Jobs running now: `active` when an executor sets it, else the unfinished jobs, at
        most ``workers``."""
        if self.active is not None:
            return self.active
        return max(0, min(self.workers, len(self.running) - len(self.results)))


def supervise(
    jobs: Sequence[Any],
    work: Callable[[Any], dict],
    workers: int,
    progress: Progress,
    worker_envs: Sequence[dict[str, str]] | None = None,
) -> list[dict]:
    """``work(job)`` (importable by name) for every job in ``workers`` spawned processes, each
    keeping one of ``worker_envs`` (no two live workers share one); records in finishing order,
    a failure record for a job whose process dies."""
    envs = _envs(worker_envs, workers)
    progress.running = list(jobs)
    with sigterm_raises():
        results, broken = _run_shared(jobs, work, envs[:workers], progress)
        if broken:
            results += _run_isolated(broken, work, envs[:workers], progress)
    return results


def run_processes(
    jobs: Sequence[Any],
    launch: Callable[[Any], Launch],
    workers: int,
    progress: Progress,
    envs: Sequence[dict[str, str]] | None = None,
) -> list[dict]:
    """Each job as one process (``launch(job)``), at most ``workers`` at a time, each with one
    of ``envs`` no other running one has; records in finishing order. However this ends, every
    started run's process group is killed."""
    envs = _envs(envs, workers)
    progress.running = list(jobs)
    started: list[int] = []
    with sigterm_raises(), cf.ThreadPoolExecutor(max_workers=workers) as pool:

        def submit(job: Any, slot: int) -> cf.Future:
            run = launch(job)
            run = dataclasses.replace(run, env={**envs[slot], **run.env})
            return pool.submit(run_launch, run, started.append)

        try:
            return _in_slots(jobs, workers, submit, progress)
        except BaseException:  # Ctrl-C, SIGTERM (SystemExit): no run may outlive this call
            for pid in started:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            raise


def _envs(envs: Sequence[dict[str, str]] | None, workers: int) -> list[dict[str, str]]:
    if envs is not None and len(envs) < workers:
        raise ValueError(f"{workers} workers need as many environments, got {len(envs)}")
    return [dict(e) for e in envs] if envs is not None else [{}] * workers


def _in_slots(
    jobs: Sequence[Any],
    slots: int,
    submit: Callable[[Any, int], cf.Future],
    progress: Progress,
    finished: Callable[[cf.Future], None] = lambda fut: None,
) -> list[dict]:
    """Each job started by ``submit(job, slot)`` once one of ``slots`` is free (one running
    job per slot); the records in the order the jobs finish (``finished(future)`` is called
    on each before its slot is reused)."""
    results: list[dict] = []
    queue, active, free = list(jobs), {}, list(range(slots))
    while queue or active:
        while queue and free:
            job, slot = queue.pop(0), free.pop(0)
            active[submit(job, slot)] = (job, slot)
        done, _ = cf.wait(set(active), timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED)
        for fut in done:
            job, slot = active.pop(fut)
            results.append(_outcome(fut, job))
            progress.results.append(results[-1])
            finished(fut)
            free.append(slot)
        progress.refresh()
    return results


def _pool(envs: list[dict[str, str]]) -> cf.ProcessPoolExecutor:
    """A pool of ``len(envs)`` spawned workers, each taking one of ``envs``."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    for env in envs:
        queue.put(env)
    return cf.ProcessPoolExecutor(
        max_workers=len(envs),
        mp_context=ctx,
        initializer=start_worker,
        initargs=(os.getpid(), queue),
    )


def start_worker(parent_pid: int, envs) -> None:
    """A worker's initializer: `die_with_parent`, then take one environment from the queue
    ``envs`` (set before any job is unpickled, so before a job's imports read it)."""
    die_with_parent(parent_pid)
    os.environ.update(envs.get())
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if threads.isdigit() and int(threads) > 0 and torch is not None:
        # torch came in with this module's imports and read its thread count already
        torch.set_num_threads(int(threads))


def die_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Make this worker die when ``parent_pid`` does: ``PR_SET_PDEATHSIG`` on Linux, and a
    daemon thread polling for reparenting everywhere."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above ran
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="dataflex-parent-watchdog", daemon=True).start()


def _kill_workers(pool: cf.ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started and SIGKILL its worker processes (their
    jobs are unfinished and continue from their checkpoints on the next call)."""
    procs = list(getattr(pool, "_processes", None) or {})
    pool.shutdown(wait=False, cancel_futures=True)
    for pid in procs:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) in the main thread (so workers are stopped on the way
    out, as for Ctrl-C); the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_shared(
    jobs: Sequence[Any], work: Callable, envs: list[dict[str, str]], progress: Progress
) -> tuple[list[dict], list[Any]]:
    """Every job in one pool of ``len(envs)`` processes: ``(records, jobs whose worker died)``
    (a dead worker breaks the pool, and with it every job still in it)."""
    results: list[dict] = []
    broken: list[Any] = []
    pool = _pool(envs)
    try:
        futures = {pool.submit(work, j): j for j in jobs}
        pending = set(futures)
        while pending:
            finished, pending = cf.wait(
                pending, timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED
            )
            for fut in finished:
                if isinstance(fut.exception(), cf.process.BrokenProcessPool):
                    broken.append(futures[fut])
                else:
                    results.append(_outcome(fut, futures[fut]))
                    progress.results.append(results[-1])
            progress.refresh()
    except BaseException:  # Ctrl-C, SIGTERM (SystemExit): no worker may outlive this call
        _kill_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True)
    order = {id(j): i for i, j in enumerate(jobs)}
    return results, sorted(broken, key=lambda j: order[id(j)])


def _run_isolated(
    jobs: Sequence[Any], work: Callable, envs: list[dict[str, str]], progress: Progress
) -> list[dict]:
    """Each job in a fresh one-process pool, at most ``len(envs)`` at a time, each pool with
    an environment no running pool holds."""
    pools: dict[cf.Future, cf.ProcessPoolExecutor] = {}

    def submit(job: Any, slot: int) -> cf.Future:
        pool = _pool([envs[slot]])
        fut = pool.submit(work, job)
        pools[fut] = pool
        return fut

    try:
        return _in_slots(jobs, len(envs), submit, progress, lambda f: pools.pop(f).shutdown())
    finally:
        for pool in pools.values():
            _kill_workers(pool)


def failure_record(job: Any, e: BaseException) -> dict:
    """The record of a run that ended with ``e`` outside the run itself (its worker process or
    task died): the error's type and last line, and its traceback."""
    text = str(e).strip()
    error = f"{type(e).__name__}: {text.splitlines()[-1] if text else ''}"
    return failed_record(job.method, job.seed, error, "".join(traceback.format_exception(e)), 0.0)


def _outcome(fut: cf.Future, job: Any) -> dict:
    """A finished future's record, or a failure record when its worker process died."""
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001  (e.g. BrokenProcessPool: a worker was killed)
        return failure_record(job, e)
