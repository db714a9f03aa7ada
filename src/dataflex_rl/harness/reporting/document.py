"""A report as data, built once from a stored analysis, and its markdown and terminal renderers.

A `Document` is a title, a lead and `Section` s of `Block` s; text is markdown. Builders fill it
from numbers already computed; `markdown`, `text` and `html_report.html` only format it, so all
three show the same sections and numbers.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from dataflex_rl.core import texttable

#: the verdict key of a baseline row (`Table.verdicts`)
BASELINE = "baseline"


@dataclass(frozen=True)
class Table:
    """Formatted cells. ``verdicts``: per row, the verdict shown (empty: none); ``link``: the
    column whose cells are report pages without extension (-1: none); ``groups``: ``(label,
    span)`` column groups over the header."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]
    verdicts: tuple[str, ...] = ()
    link: int = -1
    groups: tuple[tuple[str, int], ...] = ()

    def flat_header(self) -> tuple[str, ...]:
        """The header with each column's group in front (``group: column``)."""
        if not self.groups:
            return self.header
        labels = [g for g, span in self.groups for _ in range(span)]
        return tuple(f"{g}: {h}" if g else h for g, h in zip(labels, self.header))


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Items:
    """A bulleted list; ``details[i]`` (optional) is preformatted text shown folded under
    item i (a traceback)."""

    items: tuple[str, ...]
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Figure:
    """A plot written beside the report: its PNG ``path``, caption ``title`` and ``alt`` text."""

    path: Path
    title: str
    alt: str


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Facts:
    """``name: value`` pairs (values are markdown)."""

    pairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Link:
    """``label: <page>``: a page of the report without its extension; each renderer links its
    own (report.md, report.html)."""

    label: str
    page: str


@dataclass(frozen=True)
class Legend:
    """The verdict colours (drawn by the HTML page; the words in the tables say the same)."""


Block = Paragraph | Items | Table | Figure | Heading | Facts | Link | Legend


@dataclass(frozen=True)
class Section:
    """One section: ``sid`` (its id in report.html), its title, its blocks in order."""

    sid: str
    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Document:
    """A whole report: title, lead (markdown sentences) and sections in order. ``out``: the
    folder it is written to (figure paths are shown relative to it)."""

    title: str
    lead: str
    sections: tuple[Section, ...]
    out: Path


def markdown_table(t: Table) -> list[str]:
    """The table as markdown lines (`Table.link` cells as ``[page.md](page.md)``)."""
    align = "|" + "|".join("---:" if n else "---" for n in t.numeric) + "|"

    def cells(row: tuple[str, ...]) -> list[str]:
        return [f"[{c}.md]({c}.md)" if j == t.link and c else c for j, c in enumerate(row)]

    return [
        "| " + " | ".join(t.flat_header()) + " |",
        align,
        *("| " + " | ".join(cells(row)) + " |" for row in t.rows),
    ]


def _markdown_block(b: Block, out: Path) -> list[str]:
    if isinstance(b, Paragraph):
        return [b.text]
    if isinstance(b, Items):
        lines = []
        for i, item in enumerate(b.items):
            lines.append(f"- {item}")
            detail = b.details[i] if i < len(b.details) else ""
            if detail:
                lines += ["", "  <details><summary>details</summary>", "", "  ```"]
                lines += ["  " + x for x in detail.rstrip().splitlines()[-30:]]
                lines += ["  ```", "  </details>", ""]
        return lines
    if isinstance(b, Table):
        return markdown_table(b)
    if isinstance(b, Figure):
        return [f"![{b.alt}]({b.path.relative_to(out).as_posix()})"]
    if isinstance(b, Heading):
        return [f"### {b.text}"]
    if isinstance(b, Facts):
        return [f"- {k}: {v}" for k, v in b.pairs]
    if isinstance(b, Link):
        return [f"{b.label}: [{b.page}.md]({b.page}.md)"]
    return []  # Legend: the page's colours


def markdown_section(s: Section, out: Path) -> list[str]:
    """One section as markdown lines (a level-2 heading)."""
    md = [f"## {s.title}", ""]
    for b in s.blocks:
        lines = _markdown_block(b, out)
        md += [*lines, ""] if lines else []
    return md


def markdown(doc: Document) -> str:
    """The document as markdown (``report.md``)."""
    md = [f"# {doc.title}", "", doc.lead, ""]
    for s in doc.sections:
        md += markdown_section(s, doc.out)
    return "\n".join(md)


def _plain(text: str) -> str:
    """Markdown inline markup dropped: ``**x**`` and ```x``` as x, ``[t](p)`` as t (p)."""
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    text = re.sub(r"`([^`]+)`", r"\1", text)
    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (\2)", text)


def text_table(t: Table) -> str:
    """The table for a terminal (column groups as a header line above)."""
    rows = [[f"{c}.md" if j == t.link and c else c for j, c in enumerate(row)] for row in t.rows]
    groups = t.groups or (("", len(t.header)),)
    spans, k = [], 0
    for label, span in groups:
        spans.append((label, list(t.header[k : k + span])))
        k += span
    return texttable.text_table(spans, rows)


def text(
    doc: Document, only: tuple[str, ...] | None = None, width: int = 100, lead: bool = True
) -> str:
    """The document for a terminal: the lead (unless not ``lead``), then each section
    (``only``: those ids) with its title underlined, paragraphs wrapped at ``width``, tables
    aligned, figures by path."""

    def wrap(t: str, indent: str = "") -> list[str]:
        return textwrap.wrap(
            _plain(t),
            width,
            initial_indent=indent,
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        )

    lines = [*wrap(doc.lead), ""] if lead else []
    for s in doc.sections:
        if only is not None and s.sid not in only:
            continue
        lines += [s.title, "-" * len(s.title)]
        for b in s.blocks:
            if isinstance(b, Paragraph):
                lines += wrap(b.text)
            elif isinstance(b, Items):
                lines += [x for item in b.items for x in wrap(item, "- ")]
            elif isinstance(b, Table):
                lines.append(text_table(b))
            elif isinstance(b, Figure):
                lines.append(f"[figure: {b.title}: {b.path.relative_to(doc.out).as_posix()}]")
            elif isinstance(b, Heading):
                lines.append(f"{b.text}:")
            elif isinstance(b, Facts):
                lines += [x for k, v in b.pairs for x in wrap(f"{k}: {v}", "- ")]
            elif isinstance(b, Link):
                lines.append(f"{b.label}: {b.page}.md")
            else:
                continue
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
