"""report.html read back with html.parser: sections in order, nothing loaded from outside
data: URIs, user strings escaped, verdicts in colour and words, provenance."""

from __future__ import annotations

import base64
import importlib.metadata
import shlex
import sys
from html.parser import HTMLParser

import pytest

from dataflex_rl.harness.reporting.report import write_report
from dataflex_rl.harness.statistics.analysis import StatsOptions
from tests import release_table, report_rows

SECTIONS = report_rows.SECTIONS


class Page(HTMLParser):
    """Start tags with their attributes, section ids, and the text under each tag name."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.sections: list[str] = []
        self.stack: list[str] = []
        self.text: dict[str, list[str]] = {}
        self.rows: list[list[tuple[str, str, str]]] = []  # (tag, class, text) per cell
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "section":
            self.sections.append(a["id"])
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th") and self.rows:
            self.rows[-1].append((tag, a.get("class") or "", ""))
        if tag not in ("meta", "link", "img", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        for tag in set(self.stack):
            self.text.setdefault(tag, []).append(data)
        if self.rows and self.rows[-1] and {"td", "th"} & set(self.stack):
            tag, cls, text = self.rows[-1][-1]
            self.rows[-1][-1] = (tag, cls, text + data)


@pytest.fixture(scope="module")
def report(synthetic_report):
    return synthetic_report


@pytest.fixture(scope="module")
def page(report) -> Page:
    return Page((report / "report.html").read_text())


def test_every_section_in_order(page):
    assert page.sections == SECTIONS
    nav = [a["href"] for tag, a in page.tags if tag == "a"]
    assert nav == [f"#{s}" for s in SECTIONS]


def test_nothing_loads_from_outside(page):
    assert not [t for t, _ in page.tags if t in ("script", "iframe", "object", "embed")]
    refs = [(t, k, v) for t, a in page.tags for k, v in a.items() if k in ("src", "href")]
    outside = [r for r in refs if not r[2].startswith(("data:", "#"))]
    assert outside == []
    imgs = [a["src"] for t, a in page.tags if t == "img"]
    assert len(imgs) == 4  # forest, learning curves, profiles, proportions
    for src in imgs:
        head, _, data = src.partition(",")
        # the plot's PNG, drawn once (report.md links the same file)
        assert head == "data:image/png;base64"
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    csp = next(
        a["content"] for t, a in page.tags if a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp.startswith("default-src 'none'")


def test_user_strings_are_escaped(report, page):
    source = (report / "report.html").read_text()
    # the title and a method name carry markup: shown as text, never parsed as tags
    assert not [t for t, _ in page.tags if t in ("b", "script")]
    assert "".join(page.text["h1"]) == report_rows.TITLE
    assert "&lt;b&gt;&quot;x&quot;&amp;y&lt;/b&gt;" in source
    assert report_rows.HOSTILE in "".join(page.text["table"])
    assert "ValueError: <boom> & bust" in "".join(page.text["code"])


def test_verdicts_have_colour_and_words(page):
    # first table: the average; "up" is +6 points on every seed, "down" −6 (8 seeds, exact
    # p = 2/2^8 ≈ 0.008, Holm over 3 → 0.023 ≤ 0.05): better and worse
    table = [r for r in page.rows if r and r[0][0] == "th" and r[0][2] in ("up", "down")]
    up, down = table[0], table[1]
    assert up[1] == ("td", "verdict v-better", "▲ better")
    assert down[1] == ("td", "verdict v-worse", "▼ worse")
    hostile = next(r for r in page.rows if r[0][2] == report_rows.HOSTILE)
    assert hostile[1] == ("td", "verdict v-none", "● no detectable difference")


def test_provenance_names_the_command_and_versions(report, page):
    text = " ".join(page.text["dd"])
    assert shlex.join(sys.orig_argv) in text
    assert importlib.metadata.version("numpy") in text
    md = (report / "report.md").read_text()
    assert "## How this report was produced" in md and f"`{shlex.join(sys.orig_argv)}`" in md


def test_without_plots_the_page_has_no_figures(tmp_path):
    write_report(
        report_rows.rows(seeds=3),
        tmp_path,
        report_rows.inputs(options=StatsOptions(n_boot=200), plots=False),
    )
    page = Page((tmp_path / "report.html").read_text())
    assert page.sections == [s for s in SECTIONS if s not in ("forest", "curves", "proportions")]
    assert not [t for t, _ in page.tags if t == "img"]
    # 3 seeds: the exact test cannot go below 0.25, no verdict is possible
    assert "With 3 seeds the exact sign-flip test cannot give p below 0.25" in "".join(
        page.text["p"]
    )


def test_strata_index_page_links_every_stratum_and_shows_its_verdicts(synthetic_strata_report):
    top = synthetic_strata_report
    page = Page((top / "report.html").read_text())
    folders = sorted(p.name for p in top.iterdir() if p.is_dir())
    assert len(folders) == 8  # 2 models × 2 campaigns × 2 regimes
    assert page.sections[0] == "index" and page.sections[-2:] == ["provenance", "definitions"]
    assert sorted(page.sections[1:-2]) == folders
    assert "".join(page.text["h1"]) == release_table.TITLE
    assert not [t for t, _ in page.tags if t in ("i", "script", "img", "iframe", "object")]
    # every link is a section of the page or a stratum's own report.html, which exists
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    local = [h for h in hrefs if not h.startswith("#")]
    assert {h.lstrip("#") for h in hrefs if h.startswith("#")} == set(page.sections)
    assert sorted(set(local)) == [f"{f}/report.html" for f in folders]
    assert all((top / h).is_file() for h in local)
    # the index row of c1 (3 seeds): no verdict possible; c2 with 8 seeds decides difffilter
    index = {
        tuple(c[2] for c in r[:3]): [c[2] for c in r[3:]]
        for r in page.rows
        if r[0][2] in release_table.MODELS
    }
    assert len(index) == 8
    # reference, methods, paired seeds, verdict possible, better, worse, no detectable
    # difference, report (the word: the path is the link's, the row names the stratum)
    c1 = ["grpo", "2", "3", "no (3 paired seeds)", "0", "0", "2", "report"]
    assert index["qwen2.5-math-7b", "c1", "short"] == c1
    assert index["qwen2.5-math-7b", "c2", "long"][2:7] == ["8", "yes", "1", "0", "1"]
    text = (top / "report.html").read_text()
    # each stratum's verdict table in colour and words: difffilter +3 points, 8 seeds: better
    c2 = text.split('<section id="qwen2.5-math-7b_c2_long">')[1].split("</section>")[0]
    assert '<td class="verdict v-better"><span aria-hidden="true">▲</span> better</td>' in c2
    c1 = text.split('<section id="qwen2.5-math-7b_c1_short">')[1].split("</section>")[0]
    assert "n/a (3 seeds)" in c1 and "v-better" not in c1
    assert (
        "with 3 paired seeds the exact sign-flip test, Holm over 2, cannot give an adjusted p "
        "below 0.5 &gt; α = 0.05"
    ) in c1
