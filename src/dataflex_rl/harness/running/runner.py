"""Run an experiment's matrix strategies × seeds resumably: plan, fingerprint, resume, execute.

Run (strategy, seed s) gets ``seed=s`` and otherwise the same settings (pairing). Folder layout,
resume and failures: docs/harness.md, "Runs, resume and failures". Where runs execute is an
executor's (executors.py); what differs between hosts is the run's `Host` (`dataflex_rl.hosts`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import DirectoryLock, atomic_write_json
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.executors import LocalExecutor
from dataflex_rl.harness.running.launch import PYTHON, Launch, failed_record
from dataflex_rl.harness.running.supervisor import Progress
from dataflex_rl.hosts.host import METRICS_FILE, Host
from dataflex_rl.hosts.registry import HOSTS, class_path, get_host

DONE_FILE, ERROR_FILE, RUN_FILE = "done.json", "error.json", "run.json"


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix, self-contained and picklable (what a worker receives).

    ``config`` is the host's settings (`Host.run_config`, the arm's ``overrides`` merged in);
    ``host`` the host's name, ``host_class`` its `Host` class as ``"module:attr"`` (what the
    run's process imports: `run_host`); ``resume`` None lets the harness decide from the
    folder, True/False (``dataflex-rl train``) is passed on; ``python`` None runs in a local
    worker, else as a process (`launch_of`).
    """

    method: str
    seed: int
    strategy: dict
    config: dict
    steps: int
    out_dir: str
    train_fn: str
    host: str
    host_class: str
    mixes: bool = False
    overrides: dict = field(default_factory=dict)
    resume: bool | None = None
    python: str | None = None

    @property
    def identity(self) -> dict:
        """Everything that determines the run's result (as plain JSON data); where it is
        tracked does not."""
        identity = {
            "host": self.host,
            "strategy": self.strategy,
            "config": {k: v for k, v in self.config.items() if k != "tracking"},
            "seed": self.seed,
            "steps": self.steps,
        }
        return json.loads(json.dumps(identity, default=str))

    @property
    def fingerprint(self) -> str:
        """sha256 of `identity`."""
        blob = json.dumps(self.identity, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def locked_output(fn: Callable) -> Callable:
    """Decorate ``fn(exp, out_dir=None, ...)`` to hold `DirectoryLock` on its output folder
    (default ``runs/compare/<experiment name>``) while it runs: a second writer into the same
    folder is refused with a message naming the holder."""

    @functools.wraps(fn)
    def wrapper(exp, out_dir=None, *args, **kwargs):
        out = Path(out_dir or Path("runs") / "compare" / exp.name)
        with DirectoryLock(out):
            return fn(exp, out, *args, **kwargs)

    return wrapper


def run_tracking(
    tracking: Any, out_dir: str | Path, name: str, group: str, metric: str | None = None
) -> dict:
    """The ``tracking`` section of one run: named ``name``, in ``group``, tagged with ``metric``
    (``report --from-tracker`` reads it), MLflow in ``<out_dir>/mlflow.db`` unless set."""
    t = dataclasses.asdict(tracking)
    if metric is not None:
        t["tags"] = {**t.get("tags", {}), "metric": metric}
    t["run_name"] = f"{t['run_name']}-{name}" if t["run_name"] else name
    t["group"] = t["group"] or group
    if not t["mlflow"]["tracking_uri"]:
        t["mlflow"]["tracking_uri"] = f"sqlite:///{(Path(out_dir) / 'mlflow.db').resolve()}"
    return t


def run_host(run: RunSpec) -> Host:
    """The `Host` of ``run`` (imported from `RunSpec.host_class`)."""
    return HOSTS.get(run.host_class)()


def plan(experiment, out_dir: str | Path, train_fn: str | None = None) -> list[RunSpec]:
    """The runs of ``experiment``, seed-major (paired results arrive early); the runs of a
    host the experiment's trackers follow (`Host.tracking` None) are tracked as
    ``<label>-seed<s>``. ``train_fn``: None for the host's own."""
    host = experiment.host_impl
    config = host.run_config(experiment, {})
    configs = {
        e.label: host.run_config(experiment, e.overrides) if e.overrides else config
        for e in experiment.strategies
    }
    train_fn = train_fn or host.train_fn(experiment)
    python = host.python(experiment)
    root = Path(out_dir) / "runs"

    def tracked(label: str, seed: int) -> dict:
        if host.tracking is not None:  # the host's runs log where its own settings say
            return {}
        t = experiment.tracking, out_dir, f"{label}-seed{seed}", experiment.name
        return {"tracking": run_tracking(*t, experiment.evaluation.metric)}

    return [
        RunSpec(
            e.label,
            s,
            e.to_dict(),
            {**configs[e.label], **tracked(e.label, s)},
            experiment.budget.steps,
            str(root / e.label / f"seed{s}"),
            train_fn,
            experiment.host,
            class_path(host),
            mixes=e.mixes,
            overrides=dict(e.overrides),
            python=python,
        )
        for s in experiment.seeds
        for e in experiment.strategies
    ]


def _quiet_libraries() -> None:
    """No per-run progress bars from transformers in workers (one overall bar is shown)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


def _warning_summary(caught: list) -> tuple[list[str], list[str]]:
    """Up to 10 distinct warnings (digits folded) with counts, and the package of each."""
    counts: dict[str, int] = {}
    where: dict[str, str] = {}
    for w in caught:
        key = f"{w.category.__name__}: " + re.sub(r"\d+", "N", str(w.message))
        counts[key] = counts.get(key, 0) + 1
        where.setdefault(key, warning_package(w.filename))
    keys = list(counts)[:10]
    return [f"{counts[k]}× {k}" for k in keys], [where[k] for k in keys]


def warning_package(filename: str) -> str:
    """The top-level package of ``filename`` (after site-packages or src), else its stem."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages", "src"):
        if marker in parts[:-1]:
            return Path(parts[parts.index(marker) + 1]).stem
    return Path(filename).stem


def execute_run(run: RunSpec) -> dict:
    """Train one run in this process; never raises (a failure is returned and written)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        return _execute_run(run, caught)


def _execute_run(run: RunSpec, caught: list) -> dict:
    out = Path(run.out_dir)
    t0 = time.perf_counter()
    try:
        host = run_host(run)
        _quiet_libraries()
        if run.resume is None:
            resume = host.has_checkpoint(out) and _started_as(out) == run.fingerprint
            if out.exists() and not resume:
                shutil.rmtree(out)
        else:
            resume = run.resume
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).unlink(missing_ok=True)
        started = {"fingerprint": run.fingerprint, "method": run.method, "seed": run.seed}
        atomic_write_json(
            out / RUN_FILE, {**started, "overrides": run.overrides, "identity": run.identity}
        )
        summary, resume = host.train(run, out, resume)
        evals, props = host.read_records(out, run.config, run.mixes)
        if not evals:
            raise RuntimeError(f"{out}: the run wrote no evaluation")
        warnings_seen, packages = _warning_summary(caught)
        done = {
            "status": "done",
            **started,
            "identity": run.identity,
            "resumed": resume,
            "wall_seconds": time.perf_counter() - t0,
            "evals": evals,
            "proportions": props,
            "warnings": warnings_seen,
            "warning_packages": packages,
            "summary": summary,
        }
        atomic_write_json(out / DONE_FILE, done)
        return done
    except Exception as e:  # noqa: BLE001  (reported, and the other runs go on)
        error = f"{type(e).__name__}: {e}"
        record = failed_record(
            run.method, run.seed, error, traceback.format_exc(), time.perf_counter() - t0
        )
        try:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / ERROR_FILE, record)
        except OSError:
            pass
        return record


def _started_as(out: Path) -> str | None:
    """Fingerprint the unfinished run in ``out`` was started with (None: unknown)."""
    try:
        return json.loads((out / RUN_FILE).read_text()).get("fingerprint")
    except (OSError, ValueError):
        return None


def load_done(run: RunSpec) -> dict | None:
    """The run's ``done.json`` if it finished; ConfigError if with a different configuration."""
    path = Path(run.out_dir) / DONE_FILE
    if not path.is_file():
        return None
    done = json.loads(path.read_text())
    if done.get("fingerprint") != run.fingerprint:
        changed = differences(done["identity"], run.identity) if "identity" in done else []
        what = f" ({', '.join(changed[:6])}{', ...' if len(changed) > 6 else ''} changed)"
        raise ConfigError(
            f"{run.out_dir}: finished with a different configuration{what if changed else ''}; "
            "choose another --out, or delete this folder to rerun it"
        )
    return done


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON-like mappings."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += differences(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [] if old == new else [prefix.rstrip(".") or "(all)"]


@dataclass
class Execution:
    """What happened to the matrix: results per run (done and failed), counts, timing."""

    results: list[dict] = field(default_factory=list)
    skipped: int = 0
    wall_seconds: float = 0.0

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "failed"]

    @property
    def done(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "done"]


def launch_of(run: RunSpec) -> Launch:
    """The run as a process (``python -m dataflex_rl.harness.running.worker``, the run on
    stdin) under the run's interpreter, its folder made absolute."""
    run = dataclasses.replace(run, out_dir=str(Path(run.out_dir).resolve()))
    return Launch(
        argv=(run.python or PYTHON, "-m", "dataflex_rl.harness.running.worker"),
        run_dir=run.out_dir,
        method=run.method,
        seed=run.seed,
        stdin=json.dumps(dataclasses.asdict(run)),
        cwd=os.getcwd(),
    )


def execute(
    runs: list[RunSpec],
    workers: int | None = None,
    progress: bool = True,
    desc: str = "compare",
    executor=None,
) -> Execution:
    """Run every unfinished run on ``executor`` (default: ``workers`` local processes); finished
    ones are skipped. Failures are collected, never raised."""
    executor = executor or LocalExecutor(workers)
    t0 = time.perf_counter()
    ex = Execution()
    done = [load_done(run) if run.resume is None else None for run in runs]
    ex.results = [d for d in done if d is not None]
    ex.skipped = len(ex.results)
    todo = [run for run, d in zip(runs, done) if d is None]
    if todo:
        steps, n = max(r.steps for r in runs), len(todo)
        bar = Progress(
            len(runs),
            len(runs) - n,
            steps,
            _steps_done,
            executor.slots(n),
            progress,
            desc,
            executor.where(n),
        )
        with bar:
            ex.results += executor.run(todo, execute_run, launch_of, bar)
    order = {(r.method, r.seed): i for i, r in enumerate(runs)}
    ex.results.sort(key=lambda r: order[(r["method"], r["seed"])])
    ex.wall_seconds = time.perf_counter() - t0
    return ex


def _steps_done(run: RunSpec) -> int:
    """Training steps the run's files show done (its host's `Host.steps_done`)."""
    return run_host(run).steps_done(Path(run.out_dir))


def side_by_side(
    host: str,
    settings: dict,
    strategies: list,
    *,
    seed: int,
    steps: int,
    out_root: str | Path,
    workers: int = 2,
    resume: bool = False,
    progress: bool = True,
    train_fn: str | None = None,
) -> Execution:
    """Several strategies on one seed of host ``host`` (``dataflex-rl train`` with
    ``strategies``), each in ``out_root/<label>`` with the run settings ``settings``
    (`RunSpec.config`; ``steps`` of them trained). Without ``resume`` an existing run is
    refused (nothing is deleted). ``train_fn``: None for the host's own. Returns the
    `Execution`, results in the order of ``strategies``."""
    from dataflex_rl.core.spec import parse_strategy, strategy_label

    impl = get_host(host)
    root = Path(out_root)
    labels = [strategy_label(s) for s in strategies]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"strategies: must have distinct names, got {labels}")
    specs = [
        {**parse_strategy(s, f"strategies[{i}]").to_dict(), "name": lab}
        for i, (s, lab) in enumerate(zip(strategies, labels))
    ]
    fn, where = train_fn or impl.train_default, class_path(impl)
    runs = [
        RunSpec(lab, seed, spec, settings, steps, str(root / lab), fn, host, where, resume=resume)
        for lab, spec in zip(labels, specs)
    ]
    with DirectoryLock(root):
        if not resume:
            for r in runs:
                if (Path(r.out_dir) / METRICS_FILE).exists():
                    raise ConfigError(
                        f"{r.out_dir}: a run already exists here; use --resume "
                        "to continue it or choose another --out"
                    )
        return execute(runs, workers, progress, desc="train")
