"""What produced a report: the command line, the working folder, the time and the versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import dataflex_rl

#: distributions whose versions a report names (those installed)
PACKAGES = ("dataflex-rl", "numpy", "scipy", "matplotlib", "torch", "transformers", "pydantic")


@dataclass(frozen=True)
class Provenance:
    """How a report was produced: the shell-quoted ``sys.orig_argv``, UTC time (ISO 8601),
    versions of `PACKAGES`, and ``git describe --always --dirty`` ("" outside a checkout)."""

    command: str
    cwd: str
    written: str
    versions: tuple[tuple[str, str], ...]
    source: str = ""


def _git_describe(package_dir: Path) -> str:
    """``git describe`` of the checkout holding ``package_dir`` as ``src/dataflex_rl``; ""
    when it is not one (or git is missing)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(package_dir), *args], capture_output=True, text=True, timeout=10
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or (Path(top) / "src" / "dataflex_rl").resolve() != package_dir.resolve():
            return ""
        return git("describe", "--always", "--dirty", "--abbrev=12")
    except (OSError, subprocess.SubprocessError):
        return ""


def current() -> Provenance:
    """The provenance of this process."""
    versions = [("python", platform.python_version()), ("platform", platform.platform())]
    for name in PACKAGES:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return Provenance(
        command=shlex.join(sys.orig_argv),
        cwd=os.getcwd(),
        written=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        versions=tuple(versions),
        source=_git_describe(Path(dataflex_rl.__file__).resolve().parent),
    )
