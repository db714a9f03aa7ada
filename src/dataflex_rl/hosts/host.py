"""A host: the trainer the runs of an experiment run in, as the harness sees it (`Host`).

The harness never imports a host's framework: it asks `Host` objects for each run's settings
and checks, runs the host's training function (``"module:attr"``, imported in the run's
process) and reads the results from the files it left (docs/architecture.md#the-host-interface).
`ExternalPythonHost` is what hosts with their own Python (TRL, verl) share. Every training
function has one signature::

    train(settings, strategy: dict, *, seed: int, out_dir: str, resume: bool) -> dict
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dataflex_rl.core.registry import ConfigError, import_object

#: the run log of the engine and of TRL runs: one JSON record per line, ``{"kind", "step", ...}``
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class HostControls:
    """Where a host's run settings hold what the controls change (dotted paths: ``stream``,
    aa; ``lr``, no_update and half_lr), the host's values where unset, and how messages name
    the section (``"trl."``)."""

    stream: str
    lr: str
    stream_default: int = 0
    lr_default: float | None = None
    section: str = ""


def merge_overrides(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, nested mappings key by key (copies)."""
    out = copy.deepcopy(base)
    for k, v in overrides.items():
        out[k] = merge_overrides(out.get(k) or {}, v) if isinstance(v, dict) else copy.deepcopy(v)
    return out


class Host(ABC):
    """A trainer the harness runs experiments on (``host:`` in an experiment file).

    Class attributes (docs/architecture.md#the-host-interface): ``name`` is also the key of
    the experiment file's section holding the host's settings, ``section_doc`` that key's doc
    line (``compare --help``); ``schemas`` maps a section path to its dataclass;
    ``requires``: modules the harness's Python needs to run the host's own training function
    in its worker processes (checked before any run). What the host can do, checked by the
    harness with the same messages for every host: ``evaluation_only`` (``budget.steps: 0``
    evaluates without training; else ``no_evaluation_only`` may say why not), ``token_budget``
    (a run stops at ``budget.generated_tokens``; else ``no_token_budget`` says why not) and
    ``tracking`` (None where the experiment's ``tracking:`` follows the runs, else where the
    host's own settings set its trackers).
    """

    name: ClassVar[str]
    section_doc: ClassVar[str]
    setup: ClassVar[str]
    controls: ClassVar[HostControls]
    tracking: ClassVar[str | None] = None
    schemas: ClassVar[dict[str, type]]
    train_default: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    evaluation_only: ClassVar[bool] = False
    no_evaluation_only: ClassVar[str] = ""
    token_budget: ClassVar[bool] = False
    no_token_budget: ClassVar[str] = "it counts steps"

    # ------------------------------------------------------------ settings and planning
    @abstractmethod
    def parse_section(self, data: Any, where: str, base: Path | None) -> dict:
        """The experiment's ``<name>:`` section checked (unknown keys, wrong types named),
        with relative paths resolved against ``base`` (the experiment file's folder)."""

    @abstractmethod
    def domains(self, exp) -> list[str]:
        """The domains evaluated (the report's benchmarks)."""

    @abstractmethod
    def run_config(self, exp, overrides: dict) -> dict:
        """The mapping a run receives (`RunSpec.config`): the section with an arm's
        ``overrides`` merged in and the budget and evaluation applied."""

    def train_fn(self, exp) -> str:
        """``"module:attr"`` of the runs' training function (the experiment's, else the host's)."""
        return getattr(exp, "train_fn", None) or self.train_default

    def python(self, exp) -> str | None:
        """The interpreter of its runs: None (the harness's own), else an absolute path."""
        return None

    @abstractmethod
    def check(self, exp) -> None:
        """Before any run starts: the settings, the Python and its framework, the data (a
        `ConfigError` names the key)."""

    @abstractmethod
    def setup_lines(self, exp) -> list[str]:
        """The report's Setup lines: the host, then what is paired and what it cannot pair."""

    # ------------------------------------------------------------ running (in the run)
    def run_settings(self, config: dict) -> Any:
        """The settings the training function receives for a run's ``config`` mapping."""
        return config

    def train(self, run, out: Path, resume: bool) -> tuple[dict, bool]:
        """Train one `RunSpec` into ``out`` with its training function; ``(summary,
        resumed)``."""
        fn = import_object(run.train_fn, f"{self.name}.train_fn")
        settings = self.run_settings(run.config)
        summary = fn(settings, run.strategy, seed=run.seed, out_dir=str(out), resume=resume)
        return summary, resume

    @abstractmethod
    def read_records(self, out: Path, config: dict, mixes: bool) -> tuple[list, list]:
        """``(evals, proportions)`` from the run's files: evals ``{"step", "<domain>/sampled",
        "<domain>/greedy", ...}``, proportions ``{"step", "domain", "target", "actual"}``."""

    @abstractmethod
    def has_checkpoint(self, out: Path) -> bool:
        """The run left a checkpoint it can resume from."""

    @abstractmethod
    def steps_done(self, out: Path) -> int:
        """Training steps the run's files show done (the progress bar)."""


def metrics_steps_done(out: Path, tail_bytes: int = 65536) -> int:
    """Training steps a run's ``metrics.jsonl`` shows done: the newest ``"train"`` record's
    ``step`` + 1, read from the end (a line cut mid-write is skipped); 0 when there is none."""
    try:
        with (Path(out) / METRICS_FILE).open("rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(0, end - tail_bytes))
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:  # cut mid-write, or the first line of the tail cut by the seek
            continue
        if isinstance(record, dict) and record.get("kind") == "train":
            return int(record["step"]) + 1
    return metrics_steps_done(out, end) if end > tail_bytes else 0


def resolve_path(value: Any, base: Path | None) -> Any:
    """A setting's path (or list of paths) made absolute against ``base`` where it exists
    there; else as given (``~`` expanded): relative to the working directory."""
    if isinstance(value, list):
        return [resolve_path(v, base) for v in value]
    if not isinstance(value, str):
        return value
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None and (base / p).exists():
        return str(base / p)
    return str(p)


class ExternalPythonHost(Host):
    """A host whose runs need their own Python, which must import ``framework``; ``python -m
    <check_module>`` checks an experiment there (`check_main`) within ``check_seconds``."""

    framework: ClassVar[str]
    check_module: ClassVar[str]
    check_seconds: ClassVar[int] = 600

    def where(self, exp) -> str:
        """How messages name the host's section (``exp.yaml: trl``)."""
        from dataflex_rl.core.config import key_path

        return key_path(exp.path or exp.name, self.name)

    def python_setting(self, exp) -> str:
        """The section's ``python`` as written (relative: to the working directory)."""
        return exp.host_settings.get("python") or self.schemas[self.name].python

    def python(self, exp) -> str:
        p = Path(self.python_setting(exp)).expanduser()
        return str(p if p.is_absolute() else Path.cwd() / p)

    def check_python(self, exp) -> str:
        """The host's Python (absolute) once it runs and imports the framework and dataflex-rl;
        else a `ConfigError` naming ``<host>.python`` and the setup command."""
        key, written, exe = f"{self.where(exp)}.python", self.python_setting(exp), self.python(exp)
        hint = f"`{self.setup}` makes it ({self.framework} and dataflex-rl)"
        if not os.access(exe, os.X_OK):
            raise ConfigError(f"{key}: {written} does not exist ({exe}); {hint}")
        probe = (
            "import importlib.util as u, sys; "
            f"sys.exit(0 if u.find_spec({self.framework!r}) and u.find_spec('dataflex_rl') "
            "else 3)"
        )
        try:
            done = subprocess.run([exe, "-c", probe], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ConfigError(f"{key}: {written} does not run ({e}); {hint}") from e
        if done.returncode != 0:
            raise ConfigError(
                f"{key}: {written} lacks {self.framework} or dataflex-rl "
                f"(exit {done.returncode}); {hint}"
            )
        return exe

    def run_check(self, exp, payload: Any, env: dict[str, str] | None = None) -> None:
        """``payload`` checked in the host's Python (``python -m <check_module>``); raises a
        `ConfigError` with the message the check printed (else what the Python said)."""
        exe = self.python(exp)
        try:
            done = subprocess.run(
                [exe, "-m", self.check_module],
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                env=env,
                timeout=self.check_seconds,
            )
        except subprocess.TimeoutExpired as e:
            raise ConfigError(
                f"{self.where(exp)}: {self.name}'s check did not finish in {self.check_seconds} s"
            ) from e
        except OSError as e:
            raise ConfigError(f"{self.where(exp)}.python: {exe} cannot run ({e})") from e
        if done.returncode != 0:
            lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()]
            message = next((x for x in reversed(lines) if x.startswith(CONFIG_ERROR)), None)
            if message is not None:
                raise ConfigError(message[len(CONFIG_ERROR) :])
            raise ConfigError(
                f"{self.where(exp)}.python: {exe} cannot run the {self.name} host "
                f"(`{self.setup}` installs it): " + " | ".join(lines[-3:])
            )


#: how a check in a host's Python reports a refusal (the last such stderr line counts)
CONFIG_ERROR = "ConfigError: "


def check_main(check) -> int:
    """The body of a host's ``python -m <host>.check``: ``check(payload)`` on the JSON payload
    read from stdin; a `ConfigError` is printed as ``ConfigError: <message>`` (exit 2)."""
    import sys

    try:
        check(json.loads(sys.stdin.read()))
    except ConfigError as e:
        print(CONFIG_ERROR + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2
    return 0
