"""``python -m dataflex_rl.hosts.trl.check``: what only the TRL Python can check, before any run.

Run by the harness (`TrlHost.check`, through `ExternalPythonHost.run_check`) in
``trl.python`` with ``{"settings", "train_fn", "where", "strategies"}`` on stdin: the
GRPOConfig fields, each strategy against them, the rewards and the training function
(`run.check_settings`). Exit status 0, or 2 with ``ConfigError: <message>`` on stderr
(`hosts.host.check_main`).
"""

from __future__ import annotations

import sys

from dataflex_rl.hosts.host import check_main
from dataflex_rl.hosts.trl.run import check_settings


def check_payload(payload: dict) -> None:
    check_settings(
        payload["settings"],
        payload["train_fn"],
        payload.get("where", "trl"),
        payload.get("strategies"),
    )


if __name__ == "__main__":
    sys.exit(check_main(check_payload))
