"""One report document, three renderings: report.md, report.html and the terminal show the same
sections in the same order with the same numbers (`document.markdown`, `html_report.html`,
`document.text` of one `report.report_document`)."""

import html as html_lib
import re

import pytest

from dataflex_rl.harness.reporting.document import (
    Document,
    Items,
    Link,
    Paragraph,
    Section,
    Table,
    markdown,
    text,
)
from dataflex_rl.harness.reporting.html_report import html
from dataflex_rl.harness.reporting.report import prepare_report, report_document
from dataflex_rl.harness.statistics.analysis import StatsOptions
from tests import report_rows

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def md_sections(md: str) -> list[tuple[str, str]]:
    """(title, body) of each level-2 section of a markdown page (folded details dropped)."""
    md = re.sub(r"<details>.*?</details>", "", md, flags=re.S)
    parts = re.split(r"^## (.+)$", md, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def html_sections(page: str) -> list[tuple[str, str]]:
    """(title, visible text) of each section of the page (tags, folded details dropped)."""
    out = []
    for title, body in re.findall(r'<section id="[^"]*"><h2>(.*?)</h2>(.*?)</section>', page, re.S):
        body = re.sub(r"<details>.*?</details>", "", body, flags=re.S)
        out.append((html_lib.unescape(title), html_lib.unescape(re.sub(r"<[^>]+>", " ", body))))
    return out


def text_sections(term: str, titles: list[str]) -> list[tuple[str, str]]:
    """(title, body) of each section of the terminal text: a title, then a line of dashes."""
    lines = term.splitlines()
    starts = [
        i
        for i in range(len(lines) - 1)
        if lines[i] in titles and lines[i + 1] == "-" * len(lines[i])
    ]
    ends = [*starts[1:], len(lines)]
    return [(lines[i], "\n".join(lines[i + 2 : j])) for i, j in zip(starts, ends)]


def numbers(body: str) -> list[str]:
    return sorted(NUMBER.findall(body))


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> Document:
    out = tmp_path_factory.mktemp("document")
    parts = prepare_report(
        report_rows.rows(), out, report_rows.inputs(options=StatsOptions(n_boot=300))
    )
    return report_document(parts)


def test_three_renderings_have_the_same_sections_in_order_with_the_same_numbers(doc):
    titles = [s.title for s in doc.sections]
    assert [s.sid for s in doc.sections] == report_rows.SECTIONS
    md = md_sections(markdown(doc))
    page = html_sections(html(doc))
    term = text_sections(text(doc), titles)
    assert [t for t, _ in md] == [t for t, _ in page] == [t for t, _ in term] == titles
    for (title, a), (_, b), (_, c) in zip(md, page, term):
        assert numbers(a) == numbers(b) == numbers(c), title
    # the numbers are there: the verdict table's +6-point method, in all three
    verdicts = dict(md)["Verdicts on 'average'"]
    assert "| up | 8 |" in verdicts
    assert any(n.startswith("+6.") for n in numbers(verdicts))


def test_the_lead_is_the_same_sentences_everywhere(doc):
    md, page, term = markdown(doc), html(doc), text(doc)
    lead = re.sub(r"\*\*|`", "", doc.lead)
    shown = re.search(r'<p class="headline">(.*?)</p>', page, re.S).group(1)
    assert html_lib.unescape(re.sub(r"<[^>]+>", "", shown)) == lead
    assert md.split("\n\n")[1] == doc.lead
    assert " ".join(term.split("\n\n")[0].split()) == " ".join(lead.split())


def test_blocks_render_by_hand():
    # a hand-built document: what each renderer writes for each block
    table = Table(("method", "Δ"), (("a", "+1.0"), ("b", "n/a")), (False, True), link=-1)
    doc = Document(
        "T",
        "Lead **bold**.",
        (
            Section("one", "One", (Paragraph("p `x`"), table, Items(("i1",), ("tb",)))),
            Section("two", "Two", (Link("Full report", "s/report"),)),
        ),
        out=__import__("pathlib").Path("."),
    )
    md = markdown(doc)
    assert md.splitlines()[:10] == [
        "# T",
        "",
        "Lead **bold**.",
        "",
        "## One",
        "",
        "p `x`",
        "",
        "| method | Δ |",
        "|---|---:|",
    ]
    assert "Full report: [s/report.md](s/report.md)" in md
    page = html(doc)
    assert '<p>Full report: <a href="s/report.html">s/report.html</a></p>' in page
    assert "<li>i1<details><summary>details</summary><pre>tb</pre></details></li>" in page
    term = text(doc)
    assert term.startswith(
        "Lead bold.\n\nOne\n---\np x\n\nmethod     Δ\n------  ----\na       +1.0"
    )
    assert "Full report: s/report.md" in term
