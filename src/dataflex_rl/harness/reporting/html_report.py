"""``report.html``: a `document.Document` as one self-contained page, for a laptop or a phone
(docs/harness.md, "report.html"): plots inlined as data URIs, the style sheet in the page, no
script, a Content-Security-Policy that forbids every other request, every user string escaped,
and a table's verdict column right after the first, coloured by the row's verdict.
"""

from __future__ import annotations

import base64
import re
import struct
from html import escape
from pathlib import Path

from dataflex_rl.harness.reporting.document import (
    BASELINE,
    Document,
    Facts,
    Figure,
    Heading,
    Items,
    Legend,
    Link,
    Paragraph,
    Table,
)
from dataflex_rl.harness.reporting.plots import DPI
from dataflex_rl.harness.statistics.analysis import BETTER, NO_DIFF, TOO_FEW, WORSE

#: verdict -> (CSS class, symbol); the verdict's words are always printed beside the colour
VERDICT_STYLE = {
    BETTER: ("v-better", "▲"),
    WORSE: ("v-worse", "▼"),
    NO_DIFF: ("v-none", "●"),
    TOO_FEW: ("v-few", "○"),
    BASELINE: ("v-base", ""),
}

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

CSS = """
:root { color-scheme: light; --fg: #1d1d1f; --muted: #5b5b66; --line: #d9d9e0; --bg: #fff;
  --head: #f4f4f7; --better-bg: #d7f0dc; --better-fg: #0f5323; --worse-bg: #fadbd8;
  --worse-fg: #8a1c12; --none-bg: #ececf0; --none-fg: #3a3a44; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
body { margin: 0; color: var(--fg); background: var(--bg); line-height: 1.5;
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
main { max-width: 80rem; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.6rem; line-height: 1.25; margin: 0.5rem 0 0.75rem; overflow-wrap: anywhere; }
h2 { font-size: 1.25rem; margin: 2rem 0 0.5rem; padding-top: 0.5rem;
  border-top: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.5rem 0 0.5rem; }
p, li { overflow-wrap: anywhere; }
.headline { font-size: 1.05rem; }
nav ul { display: flex; flex-wrap: wrap; gap: 0.25rem 0.5rem; list-style: none; padding: 0;
  margin: 0.5rem 0 0; font-size: 0.9rem; }
nav a { display: inline-block; padding: 0.15rem 0.5rem; border: 1px solid var(--line);
  border-radius: 999px; color: inherit; text-decoration: none; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.88em; }
code { background: var(--head); padding: 0 0.2em; border-radius: 3px; }
pre { background: var(--head); padding: 0.75rem; overflow-x: auto; white-space: pre; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: 0.5rem 0; }
table { border-collapse: collapse; font-size: 0.9rem; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 0.3rem 0.6rem; text-align: left;
  white-space: nowrap; vertical-align: top; }
th { background: var(--head); font-weight: 600; }
thead th { white-space: normal; min-width: 3rem; vertical-align: bottom; }
tbody th { background: var(--bg); }
th:first-child { position: sticky; left: 0; z-index: 1; box-shadow: inset -1px 0 var(--line); }
td.num, th.num { text-align: right; }
td.verdict { font-weight: 600; white-space: normal; min-width: 11rem; }
.v-better { background: var(--better-bg); color: var(--better-fg); }
.v-worse { background: var(--worse-bg); color: var(--worse-fg); }
.v-none, .v-few { background: var(--none-bg); color: var(--none-fg); }
.v-base { color: var(--muted); font-weight: 400; }
.legend { font-size: 0.85rem; color: var(--muted); }
.legend span { padding: 0 0.35rem; border-radius: 3px; }
figure { margin: 0.75rem 0; }
figure img { display: block; width: 100%; max-width: var(--w); height: auto; }
figcaption { font-size: 0.85rem; color: var(--muted); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
@media (max-width: 40rem) {
  main { padding: 0.75rem 0.75rem 2rem; }
  h1 { font-size: 1.3rem; }
  body { font-size: 15px; }
  nav ul { font-size: 0.8rem; gap: 0.25rem; }
  nav a { padding: 0.05rem 0.45rem; }
  ul { padding-left: 1.25rem; }
  figure img { min-width: var(--min-w); }
  dl.facts { grid-template-columns: 1fr; }
  dl.facts dd { margin-bottom: 0.4rem; }
}
"""


def inline(text: str) -> str:
    """Escape ``text`` for HTML, then render the sentences' markdown: ``**bold**``,
    ```code``` and ``[text](relative path)`` links."""
    out = escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', out)


def bullets(items: tuple[str, ...], details: tuple[str, ...] = ()) -> str:
    def item(i: int, t: str) -> str:
        d = details[i] if i < len(details) else ""
        fold = f"<details><summary>details</summary><pre>{escape(d)}</pre></details>" if d else ""
        return f"<li>{inline(t)}{fold}</li>"

    return "<ul>" + "".join(item(i, t) for i, t in enumerate(items)) + "</ul>"


def table_html(t: Table) -> str:
    """``t`` as an HTML table in a horizontally scrolling box (see the module docstring); the
    first column stays in view while scrolling; `Table.link` cells link to ``<page>.html``
    (the word "report", the path in its title: the row names the stratum)."""
    order = list(range(len(t.header)))
    col = t.header.index("verdict") if "verdict" in t.header and t.verdicts else -1
    if col > 0:
        order = [0, col, *(j for j in order[1:] if j != col)]
    names = t.flat_header()
    head = "".join(
        f'<th scope="col"{" class=num" if t.numeric[j] else ""}>{escape(names[j])}</th>'
        for j in order
    )
    body = []
    for i, row in enumerate(t.rows):
        cells = []
        for j in order:
            text = escape(row[j])
            if j == 0:
                cells.append(f'<th scope="row">{text}</th>')
            elif j == col:
                cls, symbol = VERDICT_STYLE.get(t.verdicts[i], ("v-none", ""))
                mark = f'<span aria-hidden="true">{symbol}</span> ' if symbol else ""
                cells.append(f'<td class="verdict {cls}">{mark}{text}</td>')
            elif j == t.link and text:
                href = escape(row[j] + ".html")
                cells.append(f'<td><a href="{href}" title="{href}">report</a></td>')
            else:
                cells.append(f"<td{' class=num' if t.numeric[j] else ''}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def figure_html(f: Figure, out: Path) -> str:
    """The plot's PNG inlined as a data URI: full width up to its own size (`plots.DPI`
    pixels per inch shown at 96 CSS pixels per inch); on a phone at least 70% of it, scrolling
    sideways (labels stay readable)."""
    data = f.path.read_bytes()
    w = struct.unpack(">I", data[16:20])[0] * 96 / DPI  # the PNG header's width
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    style = f"--w: {w:.0f}px; --min-w: {min(0.7 * w, 1000):.0f}px"
    caption = f"{f.title}; also `{f.path.relative_to(out).as_posix()}`"
    return (
        f'<figure><div class="scroll"><img src="{uri}" alt="{escape(f.alt)}" '
        f'style="{style}"></div><figcaption>{inline(caption)}</figcaption></figure>'
    )


def legend() -> str:
    parts = [
        f'<span class="{cls}">{symbol} {escape(v)}</span>'
        for v, (cls, symbol) in VERDICT_STYLE.items()
        if v not in (BASELINE, TOO_FEW)
    ]
    return '<p class="legend">verdict colours (the words say the same): ' + " ".join(parts) + "</p>"


def block_html(b, out: Path) -> str:
    if isinstance(b, Paragraph):
        return f"<p>{inline(b.text)}</p>"
    if isinstance(b, Items):
        return bullets(b.items, b.details)
    if isinstance(b, Table):
        return table_html(b)
    if isinstance(b, Figure):
        return figure_html(b, out)
    if isinstance(b, Heading):
        return f"<h3>{escape(b.text)}</h3>"
    if isinstance(b, Facts):
        pairs = "".join(f"<dt>{escape(k)}</dt><dd>{inline(v)}</dd>" for k, v in b.pairs)
        return f'<dl class="facts">{pairs}</dl>'
    if isinstance(b, Link):
        href = escape(b.page + ".html")
        return f'<p>{escape(b.label)}: <a href="{href}">{href}</a></p>'
    if isinstance(b, Legend):
        return legend()
    raise TypeError(f"not a block: {type(b).__name__}")


def page_body(doc: Document) -> str:
    """The page's ``<main>``: title, lead, a navigation bar, every section (a notebook shows
    this under the scoped style sheet: `frame.Report._repr_html_`)."""
    nav = "".join(f'<li><a href="#{s.sid}">{escape(s.title)}</a></li>' for s in doc.sections)
    sections = (
        f'<section id="{s.sid}"><h2>{escape(s.title)}</h2>'
        + "".join(block_html(b, doc.out) for b in s.blocks)
        + "</section>"
        for s in doc.sections
    )
    return (
        f"<main><header><h1>{escape(doc.title)}</h1>"
        f'<p class="headline">{inline(doc.lead)}</p>'
        f'<nav aria-label="sections"><ul>{nav}</ul></nav></header>\n'
        + "\n".join(sections)
        + "\n</main>"
    )


def html(doc: Document) -> str:
    """The whole self-contained page: title, lead, a navigation bar, every section."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head>\n"
        f"<body>{page_body(doc)}</body></html>\n"
    )
