"""docs/hosts/trl.md shows the current dataflex block and every loss_type the host handles."""

from __future__ import annotations

from pathlib import Path

from dataflex_rl.hosts.common.config import HostConfig, config_table
from dataflex_rl.hosts.trl.loss import LOSS_TYPES

PAGE = Path(__file__).resolve().parents[4] / "docs" / "hosts" / "trl.md"


def test_the_block_table_is_current():
    assert config_table(HostConfig) in PAGE.read_text(), (
        "docs/hosts/trl.md: paste dataflex_rl.hosts.common.config.config_table(HostConfig)"
    )


def test_the_normalization_table_names_every_loss_type():
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    named = {name for line in rows for name in line.split(" | ")[0].strip("| ").split(", ")}
    assert {f"`{t}`" for t in LOSS_TYPES} <= named
