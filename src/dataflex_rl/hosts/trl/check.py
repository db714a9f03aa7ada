"""``python -m dataflex_rl.hosts.trl.check``: what only the TRL Python can check, before any
run (`run.check_settings` on the payload from stdin; `hosts.host.check_main` reports).
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
