"""docs/metrics.md lists every metric key the library writes (a key added without a line
in the table fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "dataflex_rl"
PREFIXES = ("dataflex", "engine", "loss", "optim", "train", "time", "eval")


def documented_keys() -> set[str]:
    """Keys of the table's first column; ``a/b/c``, ``d`` means ``a/b/c`` and ``a/b/d``;
    ``<d>`` (a domain) and ``{...}`` match one path component."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    keys = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        names = re.findall(r"`([^`]+)`", line.split(" | ")[0])
        stem = names[0].rsplit("/", 1)[0]
        keys.update(n if "/" in n else f"{stem}/{n}" for n in names)
    return keys


def matches(key: str, documented: set[str]) -> bool:
    """``key`` (its ``{...}`` fields any one component) names a documented key (whose
    ``<d>`` is any one component)."""
    source = re.compile(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(key)))
    sample = re.sub(r"\{[^}]*\}", "X", key)
    for d in documented:
        if source.fullmatch(d.replace("<d>", "X")) or re.fullmatch(
            re.escape(d).replace(re.escape("<d>"), r"[^/]+"), sample
        ):
            return True
    return False


def source_keys() -> set[str]:
    """Literal metric keys in the library's source (f-string fields become ``{...}``)."""
    alternatives = "|".join(PREFIXES)
    pat = re.compile(rf"""f?["']((?:{alternatives})/[A-Za-z0-9_{{}}./]*)["']""")
    keys = set()
    for path in SRC.rglob("*.py"):
        if "harness" in path.parts:  # the harness reads keys, it writes none
            continue
        for k in pat.findall(path.read_text()):
            if k.endswith("/"):
                continue
            keys.add(k)
    return keys


def test_every_key_in_the_source_is_in_the_table():
    documented = documented_keys()
    missing = sorted(k for k in source_keys() if not matches(k, documented))
    assert not missing, f"add these to docs/metrics.md: {missing}"


def test_the_table_parses():
    documented = documented_keys()
    assert "dataflex/weight_std" in documented and "time/eval_s" in documented
    assert matches("dataflex/mix/domain/{name}/target", documented)
    assert not matches("dataflex/domain/{name}/sampled", documented)
