"""The embedded CPU engine as a `Host` of ``compare`` (the default, ``host: engine``): runs in
the harness's worker processes, settings from the ``engine:`` section (but `OWNED` keys),
records from ``metrics.jsonl``, checkpoints ``checkpoints/step-*``."""

from __future__ import annotations

import copy
import shutil
import warnings
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import key_path
from dataflex_rl.core.metrics import domain_metric
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import EngineConfig, from_dict, resolve_paths
from dataflex_rl.hosts.host import Host, HostControls, merge_overrides, metrics_steps_done

TRAIN_FN = "dataflex_rl.hosts.engine.run:run_training"
CHECKPOINTS_DIR = "checkpoints"
#: the run's generation cost so far, in its evaluation records
TOKENS = "engine/generation_cost_tokens_at_eval"

#: engine keys the experiment owns elsewhere: key -> where to set it
OWNED = {
    "strategy": "strategies",
    "strategies": "strategies",
    "seed": "seeds",
    "steps": "budget.steps",
    "generated_tokens": "budget.generated_tokens",
    "out": "--out",
    "eval": "evaluation",
    "grpo.prompts_per_step": "budget.prompts_per_step",
    "grpo.group_size": "budget.samples_per_prompt",
    "tracking": "tracking (top level: every run and the report)",
}


class EngineHost(Host):
    """The embedded CPU engine (``host: engine``)."""

    name = "engine"
    section_doc = (
        "host engine: EngineConfig keys (policy, threads, tasks, optim, grpo, log) except "
        "steps, seed, strategy and eval, which the experiment sets"
    )
    setup = "bash scripts/quickstart.sh"
    #: what the controls change: aa another ``sampling_stream``, no_update / half_lr ``optim.lr``
    controls = HostControls(stream="sampling_stream", lr="optim.lr")
    tracking = None
    schemas = {"engine": EngineConfig}
    train_default = TRAIN_FN
    #: the policy's model library, in the harness's own worker processes
    requires = ("transformers",)
    evaluation_only = True
    token_budget = True

    def engine_config(self, exp, overrides: dict | None = None) -> EngineConfig:
        """The `EngineConfig` shared by every run of ``exp`` (strategy and seed are set per
        run), with a control arm's ``overrides`` merged in."""
        data = merge_overrides(exp.host_settings, overrides or {})
        b, e = exp.budget, exp.evaluation
        data["steps"] = b.steps
        if b.generated_tokens is not None:
            data["generated_tokens"] = b.generated_tokens
        data.setdefault("grpo", {}).update(
            prompts_per_step=b.prompts_per_step, group_size=b.samples_per_prompt
        )
        data["eval"] = {"every": e.every, "per_domain": e.per_domain, "samples": e.samples}
        log = data.setdefault("log", {})
        log.setdefault("progress", False)
        log.setdefault("plots", False)
        return from_dict(EngineConfig, data, key_path(exp.path or exp.name, self.name))

    def parse_section(self, engine: Any, where: str, base: Path | None) -> dict:
        """The ``engine:`` section without the keys the experiment owns, ``policy`` and
        ``tasks.train``/``tasks.eval`` resolved against ``base`` (checked later)."""
        if engine is None:
            return {}
        if not isinstance(engine, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(engine).__name__}")
        for key, home in OWNED.items():
            head, _, tail = key.partition(".")
            if head in engine and (
                not tail or (isinstance(engine[head], dict) and tail in engine[head])
            ):
                raise ConfigError(
                    f"{where}.{key}: set by the experiment, not the engine section; use {home}"
                )
        engine = copy.deepcopy(engine)
        policy = engine.get("policy")
        if (
            isinstance(policy, str)
            and base is not None
            and policy != "tiny"
            and not Path(policy).is_absolute()
            and (base / policy).exists()
        ):
            engine["policy"] = str(base / policy)
        tasks = engine.get("tasks")
        if base is not None and isinstance(tasks, dict):  # a dataset's files, like the policy
            for key in ("train", "eval"):
                if key in tasks:
                    tasks[key] = resolve_paths(tasks[key], base)
        return engine

    def domains(self, exp) -> list[str]:
        return list(self.engine_config(exp).tasks.domains)

    def run_config(self, exp, overrides: dict) -> dict:
        """The `EngineConfig` of an arm as a mapping."""
        return self.engine_config(exp, overrides).to_dict()

    def check(self, exp) -> None:
        """A dataset's files are read once, so every data error comes before any run."""
        engine = self.engine_config(exp)
        if engine.tasks.source == "files":
            from dataflex_rl.hosts.engine.taskio import load_file_tasks

            load_file_tasks(engine.tasks)

    def setup_lines(self, exp) -> list[str]:
        cfg, b = self.engine_config(exp), exp.budget
        mixers = [s.label for s in exp.strategies if s.mixes or s.spec.prerollout is not None]
        return [
            f"engine: policy `{cfg.policy}`, domains {', '.join(cfg.tasks.domains)}; budget "
            f"{b.steps} steps × {b.prompts_per_step} prompts × {b.samples_per_prompt} samples"
            + (
                f", each run stopped at {b.generated_tokens} generated tokens (equal generation cost)"
                if b.generated_tokens is not None
                else ""
            ),
            "prompt stream: identical per seed for strategies without mix or prerollout"
            + (f"; {', '.join(mixers)} change which prompts are drawn" if mixers else ""),
        ]

    def run_settings(self, config: dict) -> EngineConfig:
        """The run's `EngineConfig`, without a progress bar (the harness draws one)."""
        config = {**config, "log": {**(config.get("log") or {}), "progress": False}}
        return from_dict(EngineConfig, config)

    def train(self, run, out: Path, resume: bool) -> tuple[dict, bool]:
        """``(summary, resumed)``; when the harness chose to resume (`RunSpec.resume` None)
        and no checkpoint is usable, the run starts over with a warning."""
        from dataflex_rl.hosts.engine.checkpoint import CheckpointError

        try:
            return super().train(run, out, resume)
        except CheckpointError as e:
            if not resume or run.resume is not None:
                raise
            warnings.warn(
                f"{out}: no usable checkpoint ({e}); the run starts over", UserWarning, stacklevel=2
            )
        for p in out.iterdir():
            if p.is_dir():
                shutil.rmtree(p)
            elif p.name != "run.json":
                p.unlink()
        return super().train(run, out, False)

    def read_records(self, out_dir: Path, config: dict, mixes: bool) -> tuple[list, list]:
        """``(evals, proportions)`` from ``metrics.jsonl``: evals ``{"step", "<domain>/greedy",
        "<domain>/sampled", "tokens"}`` (the generation cost so far, when recorded), and for
        mixers proportions ``{"step", "domain", "target", "actual"}``."""
        from dataflex_rl.hosts.engine.runlog import read_metrics

        domains = (config.get("tasks") or {}).get("domains") or []
        evals, props = [], []
        for r in read_metrics(out_dir):
            if r.get("kind") == "eval":
                evals.append(
                    {
                        "step": r["step"],
                        **{k[len("eval/") :]: v for k, v in r.items() if k.startswith("eval/")},
                        **({"tokens": r[TOKENS]} if TOKENS in r else {}),
                    }
                )
            elif mixes and r.get("kind") == "train":
                for d in domains:
                    target = r.get(domain_metric("mix", d, "target"))
                    if target is not None:
                        props.append(
                            {
                                "step": r["step"],
                                "domain": d,
                                "target": target,
                                "actual": r.get(domain_metric("mix", d, "actual")),
                            }
                        )
        return evals, props

    def has_checkpoint(self, out: Path) -> bool:
        """The engine left a checkpoint folder (an unfinished run can continue from it)."""
        d = Path(out) / CHECKPOINTS_DIR
        return d.is_dir() and any(p.name.startswith("step-") for p in d.iterdir())

    def steps_done(self, out: Path) -> int:
        return metrics_steps_done(out)
