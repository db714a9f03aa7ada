"""``dataflex-rl export policy`` and ``dataflex-rl export tasks``: the engine's instrument for
TRL and verl (the same warm-started policy, the same tasks and verifiers)."""

from __future__ import annotations

import argparse

EXPORT_HELP = "write the engine's policy and tasks for TRL and verl (Hugging Face / verl formats)"
EXPORT_DESCRIPTION = """\
The engine's instrument, for training the same policy on the same tasks with TRL or verl:

  dataflex-rl export policy --out exported/tiny
      the shipped warm-started tiny policy (or --policy DIR) as a Hugging Face model
      directory: AutoModelForCausalLM.from_pretrained / AutoTokenizer.from_pretrained load it
      (a character-level PreTrainedTokenizerFast with the engine's ids and prompt format)
  dataflex-rl export tasks --out exported/tasks [CONFIG] [KEY=VALUE ...]
      the engine's generated tasks (default: configs/engine/default.yaml's) as verl-schema
      parquet: train.parquet, eval/<domain>.parquet, tasks.json; score them with
      dataflex_rl.tasks.rewards (verl: compute_score, TRL: correct)

docs/hosts/trl.md and docs/hosts/verl.md show both in use.
"""
POLICY_HELP = "the policy as a Hugging Face model directory (model, tokenizer, MANIFEST.json)"
POLICY_DESCRIPTION = """\
Writes config.json, model.safetensors and generation_config.json (the same weights), the
tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja: a character-level
PreTrainedTokenizerFast with the same characters and ids as the engine's, left padding) and
MANIFEST.json (the source's bootstrap record plus an 'export' entry with the parameter
sha256). tok(text) is the engine's prompt encoding, [<bos>] + one id per character;
tok(text, add_special_tokens=False) is the character ids alone; the chat template gives a
chat prompt the same <bos> + contents (joined by blank lines, as the engine's dataset loader
joins them). The engine loads the directory too (policy: DIR) with the same logits.
"""
TASKS_HELP = "the engine's generated tasks as a verl-schema dataset with their verifiers"
TASKS_DESCRIPTION = """\
Builds the tasks exactly as the engine does from CONFIG's 'tasks' section (domains,
difficulty, seeds, sizes; default: the engine's defaults, configs/engine/default.yaml) and
writes, in verl's schema (data_source and ability = the domain, prompt = one user message,
reward_model = {style: rule, ground_truth}, extra_info = {domain, index, split, key}, and a
'domain' column):

  OUT/train.parquet             every domain's training pool, domain by domain, pool order
  OUT/eval/<domain>.parquet     the first eval.per_domain held-out problems of each domain
                                (what the engine evaluates); TRL: one eval dataset each
  OUT/tasks.json                settings, row counts, file sha256s, where the rewards are

Rewards (each row verified by its domain's own rule, 1.0 or 0.0):
  verl  reward.custom_reward_function.path=pkg://dataflex_rl.tasks.rewards
        reward.custom_reward_function.name=compute_score
  TRL   reward_funcs=[dataflex_rl.tasks.rewards.correct]
The engine reads the files back with tasks.source: files and verifiers: {DOMAIN: domain}.
"""


def policy_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl export policy``."""
    from dataflex_rl.deps import require
    from dataflex_rl.hosts.engine.export import export_policy

    require("transformers", "dataflex-rl export policy")
    entry = export_policy(args.policy, args.out, force=args.force)
    print(
        f"wrote {entry['out']}: policy {entry['source']!r} as a Hugging Face model directory "
        f"({entry['vocab_size']} tokens, parameter sha256 {entry['parameter_sha256'][:16]})"
    )
    print(f"  {', '.join(entry['files'])}, MANIFEST.json")
    print(f"  AutoModelForCausalLM.from_pretrained({entry['out']!r}) / AutoTokenizer likewise")
    return 0


def tasks_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl export tasks``."""
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.export import export_engine_tasks

    source, overrides = args.config, list(getattr(args, "overrides", None) or ())
    if source is not None and "=" in source and not source.endswith((".yaml", ".yml")):
        source, overrides = None, [source, *overrides]  # no CONFIG, only KEY=VALUE
    manifest = export_engine_tasks(
        load_config(source, dotted=overrides), args.out, force=args.force
    )
    rows = manifest["rows"]
    print(f"wrote {args.out}: {', '.join(manifest['domains'])}")
    for d in manifest["domains"]:
        print(f"  {d}: {rows['train'][d]} training, {rows['eval'][d]} held-out")
    verl = manifest["rewards"]["verl"]
    print(f"  verl reward: path={verl['path']} name={verl['name']}")
    print(f"  TRL reward:  {manifest['rewards']['trl']}")
    return 0


def register_commands(sub) -> None:
    """Add ``export`` (with ``policy`` and ``tasks``) to the main CLI's subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "export", help=EXPORT_HELP, description=EXPORT_DESCRIPTION, formatter_class=raw
    )
    p.set_defaults(func=lambda _args, p=p: p.print_help() or 0)
    what = p.add_subparsers(dest="what", metavar="WHAT")
    q = what.add_parser(
        "policy", help=POLICY_HELP, description=POLICY_DESCRIPTION, formatter_class=raw
    )
    q.add_argument(
        "--policy",
        default="tiny",
        help="'tiny' (the shipped warm-started policy, default), a 'dataflex-rl bootstrap' "
        "checkpoint or a local Hugging Face model directory",
    )
    q.add_argument("--out", required=True, help="directory to write (must be empty)")
    q.add_argument("--force", action="store_true", help="write into a non-empty directory")
    q.set_defaults(func=policy_main)
    q = what.add_parser(
        "tasks", help=TASKS_HELP, description=TASKS_DESCRIPTION, formatter_class=raw
    )
    q.add_argument(
        "config",
        nargs="?",
        help="engine YAML whose 'tasks' (and eval.per_domain) to export (default: the "
        "engine's defaults)",
    )
    q.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, e.g. tasks.train_size=500 tasks.domains=[math,logic]",
    )
    q.add_argument("--out", required=True, help="directory to write (must be empty)")
    q.add_argument("--force", action="store_true", help="write into a non-empty directory")
    q.set_defaults(func=tasks_main)
