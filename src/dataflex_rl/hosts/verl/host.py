"""The verl host on the harness side: checks before any run, controls, and reading a run's logs.

A run's ``verl_metrics/attempt-N.jsonl`` holds one line per logged step, ``{"step", "data"}``;
validation accuracy is verl's ``val-core/<data_source>/<acc|reward>/mean@<n>`` (`VAL_KEY`);
where two attempts logged a step, the later counts. Parses files only: imports no verl.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import key_path
from dataflex_rl.core.metrics import metric_domain, split_domain_metric
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.host import ExternalPythonHost, HostControls, merge_overrides, resolve_path
from dataflex_rl.hosts.verl.config import VerlHostConfig
from dataflex_rl.hosts.verl.run import attempts as metrics_files
from dataflex_rl.hosts.verl.run import checkpoint_step
from dataflex_rl.hosts.verl.settings import (
    EXPERIMENT_KEYS,
    STREAM_STRIDE,
    VerlSettings,
    override_key,
    parse_settings,
    run_env,
)

#: verl's per-data-source validation accuracy (the core variable's mean over n responses)
VAL_KEY = re.compile(r"^val-core/(?P<source>.+)/(?:acc|reward)/mean@(?P<n>\d+)$")
#: a training step's line (verl's own step counter)
TRAIN_KEY = "training/global_step"
TRAIN_FN = "dataflex_rl.hosts.verl.run:run_training"
#: ray.init arguments a run that joins a running cluster must not pass
JOIN_REFUSED = ("ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus")
#: settings holding paths, resolved against the experiment file's folder where they exist there
PATH_KEYS = ("model", "train_files", "val_files", "config", "python")


def logged_steps(run_dir: str | Path) -> dict[int, dict]:
    """Step -> the metrics verl logged for it (the latest attempt's line where two attempts
    logged the step; a line cut mid-write is skipped)."""
    steps: dict[int, dict] = {}
    for path in metrics_files(run_dir):
        for line in path.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and isinstance(r.get("data"), dict) and "step" in r:
                steps[int(r["step"])] = r["data"]
    return steps


def validation(data: dict, metric: str) -> dict[str, float]:
    """``{"<domain>/<metric>": accuracy}`` from one step's metrics (empty: no validation);
    ``domain`` is the data source as metric keys write it (`metric_domain`)."""
    out = {}
    for key, value in data.items():
        m = VAL_KEY.match(key)
        if m is not None:
            out[f"{metric_domain(m.group('source'))}/{metric}"] = float(value)
    return out


def pairing_notes(settings: VerlSettings) -> list[str]:
    """The report's Setup lines: what a verl study pairs, and what verl cannot."""
    return [
        "verl host: per seed every arm starts from the same model directory and validates on "
        "the same files; data order (data.seed), the actor's mini-batch shuffle "
        "(data_loader_seed) and dataflex's intake draw are set from the seed; the rollout "
        f"seed is seed + {STREAM_STRIDE:g} x sampling stream (aa: another stream)",
        "not paired by verl: the rollout engine's sampling (vLLM/SGLang seed an engine, not "
        "a request: which sample a request gets depends on batching and scheduling), and "
        "kernels whose results depend on the batch size; greedy validation at step 0 is "
        "paired up to that nondeterminism (the pairing check reports it)",
    ]


def _resolve_override(override: Any, base: Path | None) -> Any:
    """``key=path`` with a relative path to a file that exists under ``base`` -> absolute."""
    if not isinstance(override, str) or "=" not in override or base is None:
        return override
    key, value = override.split("=", 1)
    p = Path(value)
    if value and not p.is_absolute() and "://" not in value and (base / p).is_file():
        return f"{key}={(base / p).resolve()}"
    return override


def _settings(exp) -> VerlSettings:
    return parse_settings(exp.host_settings, key_path(exp.path or exp.name, "verl"))


def _val_files(settings: VerlSettings) -> list[str]:
    files = settings.val_files
    return [files] if isinstance(files, str) else list(files)


def val_sources(settings: VerlSettings) -> list[str]:
    """The ``data_source`` values of the held-out files, in order of first appearance."""
    import pyarrow.parquet as pq

    seen: dict[str, None] = {}
    for path in _val_files(settings):
        column = pq.read_table(path, columns=["data_source"]).column("data_source")
        seen.update(dict.fromkeys(str(v) for v in column.to_pylist()))
    return list(seen)


def _hydra_ints(overrides: list[str], keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for o in overrides:
        key = override_key(o, "verl.overrides")
        if key in keys and "=" in o:
            try:
                out[key] = int(o.split("=", 1)[1])
            except ValueError:
                pass
    return out


class VerlHost(ExternalPythonHost):
    """verl 0.9.x (``host: verl``): each run a process of ``verl.python``."""

    name = "verl"
    section_doc = "host verl: the verl run's settings (docs/hosts/compare.md)"
    setup = "bash scripts/setup_verl.sh"
    no_token_budget = (
        "verl's trainer stops at trainer.total_training_steps; generation (and "
        "filter_groups' refills) happens in verl's rollout workers and ReplayBuffer, which "
        "the plugin does not meter token by token"
    )
    #: what the controls change: aa another rollout sampling stream (same model, data order
    #: and validation); no_update / half_lr the actor's learning rate
    controls = HostControls(
        stream="sampling_stream", lr="lr", lr_default=VerlSettings.lr, section="verl."
    )
    #: where a verl run's trackers are set (the experiment's ``tracking:`` is refused)
    tracking = (
        "verl.overrides: trainer.logger=[console,wandb] (or tensorboard, mlflow, ...) and "
        "trainer.project_name, verl's own loggers (each run adds the file logger compare reads)"
    )
    schemas = {"verl": VerlSettings, "verl.dataflex": VerlHostConfig}
    train_default = TRAIN_FN
    framework = "verl"
    check_module = "dataflex_rl.hosts.verl.check"
    #: seconds verl's Python has to check every arm (imports verl, composes, builds no worker)
    check_seconds = 300

    # ------------------------------------------------------------ settings and planning
    def parse_section(self, data: Any, where: str, base: Path | None) -> dict:
        """The ``verl:`` section checked (`VerlSettings`; `EXPERIMENT_KEYS` refused), with
        `PATH_KEYS` and the file paths of ``overrides`` resolved against ``base`` where they
        exist there."""
        if data is None:
            raise ConfigError(
                f"{where}: host verl needs a verl section (model, train_files, val_files; "
                "docs/hosts/compare.md)"
            )
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        for key, home in EXPERIMENT_KEYS.items():
            if key in data:
                raise ConfigError(f"{key_path(where, key)}: set by the experiment; use {home}")
        section = copy.deepcopy(data)
        for key in PATH_KEYS:
            if key in section:
                section[key] = resolve_path(section[key], base)
        if isinstance(section.get("overrides"), list):
            section["overrides"] = [_resolve_override(o, base) for o in section["overrides"]]
        parse_settings(section, where)
        return section

    def domains(self, exp) -> list[str]:
        """The held-out data sources (verl reports validation per ``data_source``):
        ``domains`` when set, else as they first appear in ``val_files``."""
        s = _settings(exp)
        return list(s.domains) if s.domains else val_sources(s)

    def run_config(self, exp, overrides: dict) -> dict:
        """The settings a run receives: the section, an arm's overrides, the budget and the
        evaluation (validated; without ``python``)."""
        b, e = exp.budget, exp.evaluation
        if e.metric == "greedy" and e.samples > 0:
            raise ConfigError(
                f"{key_path(exp.path or exp.name, 'evaluation.samples')}: host verl validates "
                "one way per run: greedy (samples: 0) or metric: sampled with samples >= 1 "
                "responses"
            )
        data = merge_overrides(exp.host_settings, overrides or {})
        data.pop("python", None)
        data.update(
            steps=b.steps,
            prompts_per_step=b.prompts_per_step,
            samples_per_prompt=b.samples_per_prompt,
            eval_every=e.every,
            eval_metric=e.metric,
            eval_samples=max(e.samples, 1),
            eval_per_domain=e.per_domain,
        )
        parse_settings(data, key_path(exp.path or exp.name, "verl"))
        return data

    def check(self, exp) -> None:
        """Before any run: verl's Python (`check_python`), the model and data files, the
        resources of the Ray mode, and in verl's Python that verl composes every arm's run
        and the dataflex trainer accepts it (`run_check`)."""
        where = self.where(exp)
        s = _settings(exp)
        self.check_python(exp)
        if not Path(s.model).is_dir():
            raise ConfigError(f"{key_path(where, 'model')}: {s.model} is not a model directory")
        train = [s.train_files] if isinstance(s.train_files, str) else s.train_files
        for key, files in (("train_files", train), ("val_files", _val_files(s))):
            for f in files:
                if not Path(f).is_file():
                    raise ConfigError(f"{key_path(where, key)}: {f}: no such file")
        if s.domains and sorted(s.domains) != sorted(val_sources(s)):
            raise ConfigError(
                f"{key_path(where, 'domains')}: {s.domains} are not the data sources of "
                f"val_files: {val_sources(s)}"
            )
        _check_ray(exp, s, where)
        arms = [
            {
                "label": e.label,
                "settings": self.run_config(exp, e.overrides),
                "strategy": e.to_dict(),
            }
            for e in exp.strategies
        ]
        env = {**os.environ, **run_env(s, os.getcwd(), os.environ.get("PYTHONPATH", ""))}
        self.run_check(exp, {"where": where, "arms": arms}, env)

    def setup_lines(self, exp) -> list[str]:
        s, b, e = _settings(exp), exp.budget, exp.evaluation
        validation = (
            "greedy" if e.metric == "greedy" else f"{max(e.samples, 1)} samples at temperature 1"
        )
        return [
            f"verl host: model `{s.model}`, data sources {', '.join(self.domains(exp))} "
            f"(held-out: the first {e.per_domain} prompts of each in val_files); budget "
            f"{b.steps} steps × {b.prompts_per_step} prompts × {b.samples_per_prompt} samples; "
            f"validation {validation} at step 0 and every {e.every or b.steps} steps; lr "
            f"{s.lr:g}; Ray: {s.ray}",
            *pairing_notes(s),
        ]

    # ------------------------------------------------------------ running (in the run)
    def read_records(self, out: Path, config: dict, mixes: bool) -> tuple[list, list]:
        """A verl run's evaluations (named by ``config["eval_metric"]``) and, for mixers,
        proportions at the strategy's step (verl's step - 1)."""
        metric = config.get("eval_metric", "greedy")
        evals, props = [], []
        for step, data in sorted(logged_steps(out).items()):
            accuracy = validation(data, metric)
            if accuracy:
                evals.append({"step": step, **accuracy})
            if mixes and TRAIN_KEY in data:
                for key, value in data.items():
                    found = split_domain_metric(key, "mix")
                    if found is not None and found[1] == "target":
                        props.append(
                            {
                                "step": step - 1,
                                "domain": found[0],
                                "target": value,
                                "actual": data.get(key[: -len("target")] + "actual"),
                            }
                        )
        return evals, props

    def steps_done(self, out: Path) -> int:
        """Training steps a run has logged (else the step it resumed from)."""
        files = metrics_files(out)
        if files:
            for line in reversed(files[-1].read_text(errors="replace").splitlines()):
                try:
                    data = json.loads(line).get("data", {})
                except (ValueError, AttributeError):
                    continue
                if isinstance(data, dict) and TRAIN_KEY in data:
                    return int(data[TRAIN_KEY])
        return checkpoint_step(out)

    def has_checkpoint(self, out: Path) -> bool:
        """verl finished a checkpoint the run can resume from."""
        return checkpoint_step(out) > 0


def _check_ray(exp, s: VerlSettings, where: str) -> None:
    """The resources a run's Ray mode needs (``verl.ray``: own or join)."""
    gpus = exp.resources.gpus_per_run
    if s.ray == "join" and gpus > 0:
        raise ConfigError(
            f"{key_path(exp.path or exp.name, 'resources.gpus_per_run')}: must be 0 with "
            "verl.ray: join (verl's own placement groups take the GPUs; a task holding them "
            "would wait for itself)"
        )
    if s.ray == "join":
        for o in s.overrides:
            if override_key(o, "verl.overrides") in JOIN_REFUSED:
                raise ConfigError(
                    f"{key_path(where, 'overrides')}: {o!r} with verl.ray: join (Ray refuses "
                    "num_cpus/num_gpus when it connects to a running cluster)"
                )
    asked = _hydra_ints(s.overrides, ("trainer.n_gpus_per_node", "trainer.nnodes"))
    if s.ray == "own" and asked.get("trainer.nnodes", 1) > 1:
        raise ConfigError(
            f"{key_path(where, 'overrides')}: trainer.nnodes > 1 needs verl.ray: join (a run "
            "with its own Ray instance has one machine)"
        )
    per_node = asked.get("trainer.n_gpus_per_node")
    if s.ray == "own" and gpus > 0 and per_node is not None and per_node != gpus:
        raise ConfigError(
            f"{key_path(exp.path or exp.name, 'resources.gpus_per_run')}: {gpus:g}, but "
            f"verl.overrides set trainer.n_gpus_per_node={per_node}: each run's own Ray "
            "instance sees only the GPUs the run holds"
        )
