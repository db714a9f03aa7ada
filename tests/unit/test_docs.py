"""The component pages are exactly what `dataflex-rl describe` prints; shipped YAML loads."""

from pathlib import Path

import pytest

from dataflex_rl.describe import all_names, describe

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "components"


@pytest.mark.parametrize("name", all_names())
def test_component_page_matches_describe(name):
    page = PAGES / f"{name}.md"
    assert page.is_file(), f"missing {page}; run: dataflex-rl describe --all --out docs/components"
    assert page.read_text() == describe(name), (
        f"{page} is stale; run: dataflex-rl describe --all --out docs/components"
    )


def test_no_stale_pages():
    names = set(all_names()) | {"README"}
    stale = [p.name for p in PAGES.glob("*.md") if p.stem not in names]
    assert not stale, f"pages for names that no longer exist: {stale}"
