"""``dataflex-rl train`` and ``dataflex-rl bootstrap``: argument parsers and entry points.

Wiring into the main CLI is ``register_commands(subparsers)``, or by hand::

    p = sub.add_parser("train"); add_train_arguments(p); p.set_defaults(func=train_main)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dataflex_rl.core.registry import ConfigError

TRAIN_HELP = "train with the embedded GRPO engine (a strategy, or the config's 'strategies' " \
             "side by side)"
BOOTSTRAP_HELP = "supervised warm start of the tiny policy; writes a checkpoint + MANIFEST"


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``dataflex-rl train``."""
    parser.add_argument("config", help="engine YAML (e.g. examples/quickstart.yaml)")
    parser.add_argument("--strategy", help="preset name or strategy YAML (overrides the "
                                           "config's 'strategy' and 'strategies')")
    parser.add_argument("--seed", type=int, help="overrides the config's seed")
    parser.add_argument("--steps", type=int, help="overrides the config's steps")
    parser.add_argument("--out", help="output directory (several strategies: one subfolder "
                                      "each)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in the output directory")
    parser.add_argument("--workers", type=int, default=2,
                        help="parallel processes when comparing strategies (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def train_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl train``; prints the summary or the side-by-side table."""
    from dataflex_rl.engine.compare import compare_strategies, format_table
    from dataflex_rl.engine.config import load_config
    from dataflex_rl.engine.run import run_training

    if args.steps is not None and args.steps < 0:
        raise ConfigError(f"--steps: must be >= 0, got {args.steps}")
    config = load_config(args.config)
    progress = False if args.no_progress else None
    if args.strategy is None and config.strategies:
        summaries = compare_strategies(config, config.strategies, seed=args.seed,
                                       steps=args.steps, out_root=args.out,
                                       workers=args.workers, resume=args.resume,
                                       progress=not args.no_progress)
        print(format_table(summaries))
        print("held-out accuracy (greedy per domain); outputs (metrics.jsonl, plots/, "
              f"checkpoint.pt) under {Path(summaries[0]['out_dir']).parent}/<strategy>/")
        return 0
    strategy = args.strategy if args.strategy is not None else config.strategy
    if isinstance(strategy, str) and strategy.endswith((".yaml", ".yml")) \
            and not Path(strategy).is_file():
        raise ConfigError(f"--strategy: {strategy}: no such file")
    summary = run_training(config, strategy, seed=args.seed, steps=args.steps,
                           out_dir=args.out, resume=args.resume, progress=progress)
    print(format_table([summary]))
    print(f"outputs: {summary['out_dir']}  parameter sha256: {summary['parameter_sha256'][:16]}")
    return 0


def add_bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``dataflex-rl bootstrap`` (defaults reproduce the shipped checkpoint)."""
    from dataflex_rl.engine.warmstart import BootstrapArgs

    d = BootstrapArgs()
    parser.add_argument("--out", default="runs/bootstrap", help="checkpoint directory")
    parser.add_argument("--seed", type=int, default=d.seed, help="init and batch-order seed")
    parser.add_argument("--steps", type=int, default=d.steps, help="supervised steps")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    parser.add_argument("--domains", nargs="+", default=list(d.domains))
    parser.add_argument("--check", action="store_true",
                        help="compare the result's parameter hash with the shipped checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def bootstrap_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl bootstrap``; prints the MANIFEST (and the check result)."""
    from dataclasses import replace

    from dataflex_rl.engine.policy import ASSETS_DIR, TINY_NAME
    from dataflex_rl.engine.warmstart import BootstrapArgs, bootstrap, read_manifest

    if args.steps < 1 or args.batch_size < 1 or args.lr <= 0:
        raise ConfigError("bootstrap: --steps and --batch-size must be >= 1 and --lr > 0")
    bargs = replace(BootstrapArgs(), seed=args.seed, steps=args.steps,
                    batch_size=args.batch_size, lr=args.lr, domains=tuple(args.domains))
    manifest = bootstrap(args.out, bargs, progress=not args.no_progress)
    print(json.dumps(manifest, indent=1))
    if args.check:
        shipped = read_manifest(ASSETS_DIR / TINY_NAME)
        same = shipped["parameter_sha256"] == manifest["parameter_sha256"]
        print("matches the shipped checkpoint" if same else
              f"DIFFERS from the shipped checkpoint ({shipped['parameter_sha256'][:16]})")
        if not same and shipped.get("cpu_capability") != manifest["cpu_capability"]:
            print(f"(the shipped checkpoint was built on CPU capability "
                  f"{shipped.get('cpu_capability')!r}, this machine has "
                  f"{manifest['cpu_capability']!r}: float reductions differ, so the hash "
                  "reproduces only on the same capability)")
        return 0 if same else 1
    return 0


def register_commands(sub) -> None:
    """Add ``train`` and ``bootstrap`` to the main CLI's subparsers."""
    p = sub.add_parser("train", help=TRAIN_HELP, description=TRAIN_HELP)
    add_train_arguments(p)
    p.set_defaults(func=train_main)
    p = sub.add_parser("bootstrap", help=BOOTSTRAP_HELP, description=BOOTSTRAP_HELP)
    add_bootstrap_arguments(p)
    p.set_defaults(func=bootstrap_main)
