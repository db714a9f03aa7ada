"""Every shipped strategy YAML loads and builds."""

from pathlib import Path

import pytest

from dataflex_rl import Strategy

ROOT = Path(__file__).resolve().parents[2]
STRATEGY_FILES = sorted((ROOT / "configs" / "strategies").glob("*.yaml"))


def test_there_are_shipped_strategies():
    assert STRATEGY_FILES


@pytest.mark.parametrize("path", STRATEGY_FILES, ids=lambda p: p.name)
def test_shipped_strategy_builds(path):
    s = Strategy(path, domains=["math", "logic", "science"])
    assert s.spec.name == path.stem
    assert s.parts, "a shipped strategy enables at least one mechanism"
