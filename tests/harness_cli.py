"""Run a harness subcommand (``compare``, ``report``) in-process, as the CLI would."""

from __future__ import annotations

import argparse

from dataflex_rl.cli import CommandParser
from dataflex_rl.cli.harness import register_commands


def run_cli(argv):
    parser = argparse.ArgumentParser(prog="dataflex-rl")
    register_commands(parser.add_subparsers(parser_class=CommandParser))
    args = parser.parse_args(argv)
    return args.func(args)
