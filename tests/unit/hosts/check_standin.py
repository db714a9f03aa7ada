"""``python -m tests.unit.hosts.check_standin``: a host's check (`check_main`) that refuses what
its payload says to."""

import sys

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.host import check_main


def check(payload: dict) -> None:
    if payload["refuse"]:
        raise ConfigError(payload["refuse"])


if __name__ == "__main__":
    sys.exit(check_main(check))
