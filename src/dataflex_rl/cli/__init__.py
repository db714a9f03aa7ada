"""The ``dataflex-rl`` command line: ``list`` and ``describe`` here, ``train`` and ``bootstrap``
in `dataflex_rl.cli.engine`, ``compare`` and ``report`` in `dataflex_rl.cli.harness`, ``export``
in `dataflex_rl.cli.export`.

The commands sit above every other layer: they may import the engine and the harness alike.
"""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
dataflex-rl: data strategies for RLVR/GRPO (select, tokens, reweight, mix, prerollout) as
configurable parts of one unchanged training loop.

  dataflex-rl list                 presets and components, one line each
  dataflex-rl describe difffilter  parameters, defaults, ranges, signals, paper
  dataflex-rl train examples/quickstart.yaml            GRPO on the embedded CPU engine
  dataflex-rl compare configs/experiments/quick.yaml    strategies x seeds, paired statistics
  dataflex-rl report --from-csv results.csv             the same statistics for external results
  dataflex-rl replay runs/baseline-s0 --strategy maxvar  what another strategy would have done
  dataflex-rl export policy --out exported/tiny         the tiny policy for TRL / verl (HF format)
  dataflex-rl export tasks --out exported/tasks         the default tasks as verl-schema parquet

Errors are one line (exit status 2); --debug (anywhere) shows the traceback.
"""


def _cmd_list(args: argparse.Namespace) -> int:
    from dataflex_rl.core.base import REGISTRIES
    from dataflex_rl.describe import one_line
    from dataflex_rl.presets import PRESETS

    rows = [("preset", n) for n in PRESETS]
    for kind, reg in REGISTRIES.items():
        rows += [(kind, n) for n in reg.names()]
    if args.kind:
        rows = [r for r in rows if r[0].replace(" ", "_") == args.kind]
    width = max(len(n) for _, n in rows)
    for kind, name in rows:
        print(f"{kind:<12} {name:<{width}}  {one_line(kind, name)}")
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    from dataflex_rl.describe import describe, write_docs

    if args.all:
        files = write_docs(args.out)
        print(f"wrote {len(files)} pages to {args.out}")
        return 0
    if not args.name:
        raise SystemExit("dataflex-rl describe: give a NAME (or --all --out DIR)")
    print(describe(args.name), end="")
    return 0


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser whose arguments (``arguments=``, a function of the parser) and
    ``epilog`` may be functions, run when this command is parsed or its help shown: ``train``
    and ``compare`` read their ranges and key tables from the engine's declarations (which
    import torch) only when they run, so ``report`` and ``--help`` start without torch."""

    def __init__(self, *args, arguments=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def _complete(self) -> None:
        if self._arguments is not None:
            add, self._arguments = self._arguments, None
            add(self)
        if callable(self.epilog):
            self.epilog = self.epilog()

    def parse_known_args(self, args=None, namespace=None):
        self._complete()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._complete()
        return super().format_usage()

    def format_help(self) -> str:
        self._complete()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dataflex-rl",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error (also accepted after COMMAND)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    p = sub.add_parser("list", help="list presets and components, one line each")
    p.add_argument(
        "--kind",
        choices=["preset", "scorer", "selector", "reweighter", "mixer", "skip_policy"],
        help="only this kind",
    )
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser(
        "describe",
        help="describe a preset or component: parameters with "
        "defaults and ranges, signals needed, granularity, paper",
    )
    p.add_argument("name", nargs="?", help="a preset or component name (see 'dataflex-rl list')")
    p.add_argument("--all", action="store_true", help="write one page per name (the docs)")
    p.add_argument("--out", default="docs/components", help="folder for --all")
    p.set_defaults(func=_cmd_describe)
    from dataflex_rl.cli import engine as engine_commands
    from dataflex_rl.cli import export as export_commands
    from dataflex_rl.cli import harness as harness_commands

    engine_commands.register_commands(sub)
    harness_commands.register_commands(sub)
    export_commands.register_commands(sub)
    return parser


#: errors a user can cause and fix (a bad config or option, a missing file or package, bad
#: input data): one line and exit status 2, no traceback (``--debug`` shows it)
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    ImportError,
)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. ``--debug`` anywhere before ``--`` re-raises errors with the traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    head = argv[: argv.index("--")] if "--" in argv else argv
    debug = "--debug" in head
    if debug:
        argv.remove("--debug")
    try:
        parser = build_parser()
        args = parse_args(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        if debug:
            raise
        print(f"dataflex-rl: error: {error_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("dataflex-rl: interrupted", file=sys.stderr)
        return 130


def parse_args(parser, argv: list[str]):
    """``parser.parse_args``, but KEY=VALUE overrides may also follow options (argparse stops
    a ``nargs="*"`` positional at the first option): leftover ``KEY=VALUE`` words join them."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all(_looks_like_override(w) for w in extra):
            args.overrides = [*(args.overrides or ()), *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _looks_like_override(word: str) -> bool:
    key, eq, _ = word.partition("=")
    return bool(eq) and bool(key) and not word.startswith("-")


def error_message(e: BaseException) -> str:
    """One line for a user error: the message, with the file for OS errors, and a pointer to
    ``--debug`` for errors that are not configuration errors (they may be a bug)."""
    from dataflex_rl.core.registry import ConfigError

    if isinstance(e, OSError) and e.filename is not None:
        msg = f"{e.filename}: {e.strerror or e}"
    else:
        msg = str(e) or type(e).__name__
    if not isinstance(e, ConfigError):
        msg += f" ({type(e).__name__}; run with --debug for the traceback)"
    return msg
