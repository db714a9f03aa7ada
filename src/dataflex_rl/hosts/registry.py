"""Hosts of ``compare``: which trainer runs each run of an experiment (``host:`` in the file).

``HOSTS`` maps a host's name to the module that describes it to the harness. The harness
never imports a host's framework: a host's runs execute its training function
(``"module:attr"``, imported by name inside the run's process) under the host's Python, and
the harness reads their results back from the files they leave. A host module defines:

Settings and planning (in the harness's process)
    ``SETUP``: the command that installs the host (named when its Python is missing).
    ``parse_section(data, where, base) -> dict``: the experiment's ``<host>:`` section checked
    (unknown keys, wrong types named) with relative paths resolved against ``base``.
    ``domains(exp) -> list[str]``: the domains evaluated (the report's benchmarks).
    ``run_config(exp, overrides) -> dict``: the mapping a run receives (`RunSpec.config`): the
    section with an arm's overrides merged in and the budget and evaluation applied.
    ``CONTROLS``: a `controls.HostControls`, where the settings ``run_config`` returns hold
    the sampling stream (aa: another) and the learning rate (no_update: 0, half_lr: half);
    `controls.control_overrides` makes a control arm's overrides from it (drop_half changes
    the strategy only).
    ``TRACKING``: None where the experiment's ``tracking:`` section applies to the host's
    runs; else where the host's own settings set its trackers (``tracking:`` is refused,
    naming it).
    ``train_fn(exp) -> str``: ``"module:attr"`` of the training function.
    ``python(exp) -> str | None``: the interpreter of its runs (None: the harness's own, and
    runs execute inside local worker processes; else each run is a process of that Python).
    ``check(exp)``: before any run starts: the settings, the Python and its framework.
    ``setup_lines(exp) -> list[str]``: the report's Setup lines on the host, what is paired
    and what it cannot pair.

Running (in the run's process, under the host's Python)
    ``train(run, out, resume) -> (summary, resumed)``: train one `RunSpec` into ``out``.
    ``read_records(out, config, mixes) -> (evals, proportions)``: evaluation records
    ``{"step", "<domain>/sampled", "<domain>/greedy"}`` parsed from the run's files.
    ``has_checkpoint(out)``: the run left a checkpoint it can resume from.
    ``steps_done(out)``: training steps its files show done (the progress bar).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from dataflex_rl.core.registry import ConfigError, suggest

#: host name -> the module describing it to the harness
HOSTS = {
    "engine": "dataflex_rl.hosts.engine.host",
    "trl": "dataflex_rl.hosts.trl.host",
    "verl": "dataflex_rl.hosts.verl.host",
}
#: the experiment sections of every host but the engine's (``trl:``, ``verl:``), including
#: hosts not registered here yet, so a file naming one gets a clear error, not "unknown key"
SECTIONS = ("engine", "trl", "verl")


def host_module(name: str, where: str = "host") -> ModuleType:
    """The module of host ``name``.

    Raises:
        ConfigError: an unknown host (the valid ones listed).
    """
    if name not in HOSTS:
        raise ConfigError(
            f"{where}: unknown host {name!r}.{suggest(str(name), list(HOSTS))} "
            f"Hosts: {', '.join(HOSTS)}"
        )
    return importlib.import_module(HOSTS[name])
