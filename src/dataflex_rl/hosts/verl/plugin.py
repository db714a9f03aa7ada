"""verl plugin entry point: importing this module registers the ``dataflex`` trainer mode.

verl imports every ``verl.plugins`` entry point from ``verl/__init__.py`` (in the driver and in
every Ray actor) and swallows exceptions at DEBUG level, so this module says itself, loudly,
whether it loaded, and whether the installed verl is in the supported range. Set
``DATAFLEX_VERL_LOG_LEVEL=WARNING`` to silence the success line.

Declared in ``pyproject.toml``::

    [project.entry-points."verl.plugins"]
    dataflex = "dataflex_rl.hosts.verl.plugin"
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import PackageNotFoundError, version

#: verl versions this host was built and tested against: [low, high)
SUPPORTED = ("0.9.1", "0.10")

logger = logging.getLogger("dataflex_rl.hosts.verl")
try:
    logger.setLevel(os.environ.get("DATAFLEX_VERL_LOG_LEVEL", "INFO").upper())
except ValueError:   # an unknown level name: keep the default rather than fail to load
    logger.setLevel(logging.INFO)


def _parse(v: str):
    from packaging.version import Version  # a verl dependency

    return Version(v)


def check_version(installed: str) -> bool:
    """Whether ``installed`` lies in `SUPPORTED`; logs an error when it does not."""
    low, high = SUPPORTED
    ok = _parse(low) <= _parse(installed) < _parse(high)
    if not ok:
        logger.error("dataflex-rl: verl %s is outside the supported range >=%s,<%s; the "
                     "'dataflex' trainer mode is registered but may break. Install "
                     "verl>=%s,<%s (pip install 'dataflex-rl[verl]').", installed, low, high,
                     low, high)
    return ok


def register() -> None:
    """Register the trainer mode (idempotent); log success or the full failure."""
    try:
        installed = version("verl")
    except PackageNotFoundError:
        installed = "unknown"
    if installed != "unknown":
        check_version(installed)
    try:
        from dataflex_rl.hosts.verl import trainer  # registers on import
    except Exception:
        logger.error("dataflex-rl: FAILED to register verl trainer mode 'dataflex' (verl %s); "
                     "trainer.v1.trainer_mode=dataflex will not be found", installed,
                     exc_info=True)
        raise
    logger.info("dataflex-rl: registered verl trainer mode %r (verl %s, pid %d)",
                trainer.TRAINER_MODE, installed, os.getpid())


register()
