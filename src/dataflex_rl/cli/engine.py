"""``dataflex-rl train`` and ``dataflex-rl bootstrap``: argument parsers and entry points.

Wiring into the main CLI is ``register_commands(subparsers)``, or by hand::

    p = sub.add_parser("train"); add_train_arguments(p); p.set_defaults(func=train_main)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dataflex_rl.core.registry import ConfigError

TRAIN_HELP = (
    "train with the embedded GRPO engine (a strategy, or the config's 'strategies' side by side)"
)
BOOTSTRAP_HELP = "supervised warm start of the tiny policy; writes a checkpoint + MANIFEST"


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``dataflex-rl train`` (numeric ranges from the config declarations)."""
    from dataflex_rl.core.config import field_type, number_type, with_range
    from dataflex_rl.hosts.engine.config import EngineConfig

    seed, steps = field_type(EngineConfig, "seed"), field_type(EngineConfig, "steps")
    workers = number_type(int, ge=1)
    parser.add_argument("config", help="engine YAML (e.g. examples/quickstart.yaml)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, e.g. optim.lr=3e-4 grpo.group_size=4 "
        "strategy=maxvar (values are YAML; checked like the file; strategy=... runs just that "
        "strategy instead of the config's 'strategies', strategies=[a,b] runs several)",
    )
    parser.add_argument(
        "--strategy",
        help="preset name or strategy YAML (overrides the config's 'strategy' and 'strategies')",
    )
    parser.add_argument("--seed", type=seed, help=with_range("overrides the config's seed", seed))
    parser.add_argument(
        "--steps", type=steps, help=with_range("overrides the config's steps", steps)
    )
    parser.add_argument("--out", help="output directory (several strategies: one subfolder each)")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in the output directory"
    )
    parser.add_argument(
        "--workers",
        type=workers,
        default=2,
        help=with_range("parallel processes when comparing strategies (default 2)", workers),
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def train_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl train``; a config's ``strategies`` run side by side (`side_by_side`)."""
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.run import format_table, run_training

    config = load_config(args.config, dotted=getattr(args, "overrides", None) or ())
    config = check_engine_dependencies(config, "dataflex-rl train")
    progress = False if args.no_progress else None
    if args.strategy is None and config.strategies:
        return _train_side_by_side(config, args)
    strategy = args.strategy if args.strategy is not None else config.strategy
    if (
        isinstance(strategy, str)
        and strategy.endswith((".yaml", ".yml"))
        and not Path(strategy).is_file()
    ):
        raise ConfigError(f"--strategy: {strategy}: no such file")
    summary = run_training(
        config,
        strategy,
        seed=args.seed,
        steps=args.steps,
        out_dir=args.out,
        resume=args.resume,
        progress=progress,
    )
    print(format_table([summary]))
    print(f"outputs: {summary['out_dir']}  parameter sha256: {summary['parameter_sha256'][:16]}")
    return 0


def _train_side_by_side(config, args: argparse.Namespace) -> int:
    """The config's ``strategies`` on one seed; 1 when a run failed (the others still ran)."""
    from dataflex_rl.hosts.engine.run import format_table
    from dataflex_rl.hosts.engine.taskio import load_file_tasks

    if config.tasks.source == "files":
        load_file_tasks(config.tasks)  # every data error before any run starts
    ex = engine_side_by_side(
        config,
        config.strategies,
        seed=args.seed,
        steps=args.steps,
        out_root=args.out,
        workers=args.workers,
        resume=args.resume,
        progress=not args.no_progress,
    )
    for r in ex.done:
        for w in r.get("warnings", []):
            print(f"{r['method']}: {w}", file=sys.stderr)
    for r in ex.failed:
        print(f"{r['method']}: FAILED: {r['error']}", file=sys.stderr)
    if ex.done:
        print(format_table([r["summary"] for r in ex.done]))
        root = Path(ex.done[0]["summary"]["out_dir"]).parent
        print(
            "held-out accuracy per domain, the decision metric (sampled when measured, "
            "docs/engine.md) first; outputs (metrics.jsonl, plots/, "
            f"checkpoints/) under {root}/<strategy>/"
        )
    return 1 if ex.failed else 0


def engine_side_by_side(
    config,
    strategies: list,
    *,
    seed: int | None = None,
    steps: int | None = None,
    out_root: str | Path | None = None,
    workers: int = 2,
    resume: bool = False,
    progress: bool = True,
):
    """``strategies`` side by side on the engine (`runner.side_by_side`) with the
    `EngineConfig` ``config``; ``seed``, ``steps`` and ``out_root`` default to its own."""
    from dataflex_rl.harness.running.runner import side_by_side
    from dataflex_rl.tracking import require_backends

    require_backends(config.tracking, "dataflex-rl train")  # before any run starts
    seed = config.seed if seed is None else seed
    steps = config.steps if steps is None else steps
    return side_by_side(
        "engine",
        {**config.to_dict(), "steps": steps},
        strategies,
        seed=seed,
        steps=steps,
        out_root=out_root or config.out or "runs/compare",
        workers=workers,
        resume=resume,
        progress=progress,
    )


def check_engine_dependencies(config, command: str):
    """Before any work: the engine's policy needs transformers and each tracker of
    ``tracking.backends`` its library (an error naming the extra); without matplotlib the
    plots are skipped with one line (the config is returned with ``log.plots`` off)."""
    from dataclasses import replace

    from dataflex_rl.deps import plots_available, require
    from dataflex_rl.tracking import require_backends

    require("transformers", f"{command} (the embedded engine's policy)")
    require_backends(config.tracking, command)
    if config.log.plots and not plots_available(f"{command}: PNG plots"):
        config = replace(config, log=replace(config.log, plots=False))
    return config


def add_bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``dataflex-rl bootstrap`` (defaults reproduce the shipped checkpoint)."""
    from dataflex_rl.core.config import number_type, with_range
    from dataflex_rl.hosts.engine.warmstart import BootstrapArgs

    d = BootstrapArgs()
    seed, count, lr = number_type(int, ge=0), number_type(int, ge=1), number_type(float, gt=0.0)
    parser.add_argument("--out", default="runs/bootstrap", help="checkpoint directory")
    parser.add_argument(
        "--seed", type=seed, default=d.seed, help=with_range("init and batch-order seed", seed)
    )
    parser.add_argument(
        "--steps", type=count, default=d.steps, help=with_range("supervised steps", count)
    )
    parser.add_argument(
        "--batch-size",
        type=count,
        default=d.batch_size,
        help=with_range("examples per step", count),
    )
    parser.add_argument("--lr", type=lr, default=d.lr, help=with_range("peak learning rate", lr))
    parser.add_argument("--domains", nargs="+", default=list(d.domains))
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the result's parameter hash with the shipped checkpoint",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def bootstrap_main(args: argparse.Namespace) -> int:
    """Run ``dataflex-rl bootstrap``; prints the MANIFEST (and the check result)."""
    from dataclasses import replace

    from dataflex_rl.deps import require
    from dataflex_rl.hosts.engine.policy import ASSETS_DIR, TINY_NAME
    from dataflex_rl.hosts.engine.warmstart import BootstrapArgs, bootstrap, read_manifest

    require("transformers", "dataflex-rl bootstrap (the policy)")
    bargs = replace(
        BootstrapArgs(),
        seed=args.seed,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        domains=tuple(args.domains),
    )
    manifest = bootstrap(args.out, bargs, progress=not args.no_progress)
    print(json.dumps(manifest, indent=1))
    if args.check:
        shipped = read_manifest(ASSETS_DIR / TINY_NAME)
        same = shipped["parameter_sha256"] == manifest["parameter_sha256"]
        print(
            "matches the shipped checkpoint"
            if same
            else f"DIFFERS from the shipped checkpoint ({shipped['parameter_sha256'][:16]})"
        )
        if not same and shipped.get("cpu_capability") != manifest["cpu_capability"]:
            print(
                f"(the shipped checkpoint was built on CPU capability "
                f"{shipped.get('cpu_capability')!r}, this machine has "
                f"{manifest['cpu_capability']!r}: float reductions differ, so the hash "
                "reproduces only on the same capability)"
            )
        return 0 if same else 1
    return 0


def register_commands(sub) -> None:
    """Add ``train`` and ``bootstrap`` to the main CLI's subparsers."""

    def keys() -> str:
        from dataflex_rl.core.config import help_text
        from dataflex_rl.hosts.engine.config import EngineConfig

        return help_text(EngineConfig, "config keys (in the YAML, or KEY=VALUE after it):")

    p = sub.add_parser(
        "train",
        help=TRAIN_HELP,
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=keys,
        arguments=add_train_arguments,
    )
    p.set_defaults(func=train_main)
    p = sub.add_parser(
        "bootstrap",
        help=BOOTSTRAP_HELP,
        description=BOOTSTRAP_HELP,
        arguments=add_bootstrap_arguments,
    )
    p.set_defaults(func=bootstrap_main)
