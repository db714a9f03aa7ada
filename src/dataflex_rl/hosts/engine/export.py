"""A policy as a plain Hugging Face model directory (``dataflex-rl export policy``), loadable
by ``AutoModelForCausalLM``/``AutoTokenizer`` in TRL, verl or the engine (same logits and ids);
and an engine config's tasks in verl's schema (``dataflex-rl export tasks``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataflex_rl.core.io import require_empty_dir
from dataflex_rl.hosts.engine.policy import _quiet_transformers, load_policy, parameter_hash
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer, hf_tokenizer
from dataflex_rl.hosts.engine.warmstart import MANIFEST_FILE, policy_manifest

#: the class name written into ``tokenizer_config.json``: transformers 4.x and 5.x both load it
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def export_policy(spec: str | Path, out: str | Path, *, force: bool = False) -> dict[str, Any]:
    """Write the policy ``spec`` (as `load_policy` takes) as a Hugging Face model directory
    ``out``; returns the ``export`` entry of ``out/MANIFEST.json`` (beside the source's).

    Raises:
        ConfigError: ``out`` holds files and ``force`` is not set (they are listed).
        FileNotFoundError: ``spec`` is not a policy.
    """
    target = require_empty_dir(out, "export policy", force)
    policy = load_policy(spec)
    context = getattr(policy.model.config, "max_position_embeddings", None)
    tokenizer = (
        hf_tokenizer(policy.tokenizer, context)
        if isinstance(policy.tokenizer, CharTokenizer)
        else policy.tokenizer.tok
    )
    target.mkdir(parents=True, exist_ok=True)
    with _quiet_transformers():
        policy.model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    config_file = target / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["tokenizer_class"] = TOKENIZER_CLASS
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    entry = {
        "out": str(target),
        "source": str(spec),
        "parameter_sha256": parameter_hash(policy.model),
        "vocab_size": len(tokenizer),
        "files": sorted(p.name for p in target.iterdir() if p.name != MANIFEST_FILE),
    }
    manifest = policy_manifest(str(spec)) or {}
    manifest["export"] = entry
    (target / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return entry


def export_engine_tasks(config, out: str | Path, *, force: bool = False) -> dict[str, Any]:
    """Write the generated tasks of an engine config (the first ``eval.per_domain`` held-out
    problems) with `dataflex_rl.tasks.export.export_tasks`; returns the manifest."""
    import dataclasses

    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.hosts.engine.config import default_difficulty
    from dataflex_rl.hosts.engine.trainer import tasks_from_config
    from dataflex_rl.tasks.export import export_tasks

    t = config.tasks
    if t.source != "generated":
        raise ConfigError(
            f"export tasks: tasks.source is {t.source!r}; only generated tasks are exported "
            "(files are already a dataset: give them to TRL or verl as they are)"
        )
    settings = dataclasses.asdict(t)
    if t.difficulty is None:
        settings["difficulty"] = default_difficulty(t.domains)
    settings["eval_per_domain"] = config.eval.per_domain
    return export_tasks(
        tasks_from_config(config),
        out,
        eval_per_domain=config.eval.per_domain,
        settings=settings,
        force=force,
    )
