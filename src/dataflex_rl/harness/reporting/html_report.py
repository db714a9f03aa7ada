"""``report.html``: the report as one self-contained page, to open on a laptop or a phone.

It renders what the `Analysis` stores (its numbers, aggregates included), the generated
sentences of `narrative` and the plots, and computes no statistic itself. One file: the
plots are inlined as SVG data URIs, the style sheet is in the page, there is no script, and a
Content-Security-Policy forbids every request but data: images, so the page loads nothing
from anywhere. Every string that comes from the user (method, benchmark and file names,
errors) is HTML-escaped. Sections, in order: sensitivity, verdicts (colour and text), forest
plot, the caller's sections (``--until-decided``'s rounds), learning curves,
per-benchmark/domain sections, ranking, aggregates, domain proportions,
failed runs, setup, how it was produced (command, versions), definitions.

`render_index` is the top page of a report per stratum (``report --by``): an index linking each
stratum's own report.html, then each stratum's headline and verdict table, from the same pieces.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path

from dataflex_rl.harness.reporting import narrative, tables
from dataflex_rl.harness.reporting.narrative import Fmt
from dataflex_rl.harness.reporting.provenance import Provenance
from dataflex_rl.harness.reporting.tables import BASELINE, Table, TableSection
from dataflex_rl.harness.statistics.analysis import BETTER, NO_DIFF, TOO_FEW, WORSE, Analysis

#: verdict -> (CSS class, symbol); the verdict's words are always printed beside the colour
VERDICT_STYLE = {
    BETTER: ("v-better", "▲"),
    WORSE: ("v-worse", "▼"),
    NO_DIFF: ("v-none", "●"),
    TOO_FEW: ("v-few", "○"),
    BASELINE: ("v-base", ""),
}

#: figure key of `write_report` -> (section id, title, alt text)
FIGURES = {
    "forest": ("forest", "Forest plot", "paired deltas against the baseline per summary"),
    "curves": ("curves", "Learning curves", "mean held-out score per method and checkpoint"),
    "tokens": (
        "tokens",
        "Accuracy against generated tokens",
        "mean held-out score per method against the generation cost spent",
    ),
    "profiles": ("profiles", "Performance profiles", "fraction of scores above each threshold"),
    "proportions": ("proportions", "Domain proportions", "mixers' domain proportions per step"),
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
    """Escape ``text`` for HTML, then render the sentences' markdown: ``**bold**`` and
    ```code```."""
    out = html.escape(text, quote=True)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def bullets(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{inline(t)}</li>" for t in items) + "</ul>"


def table_html(t: Table) -> str:
    """``t`` as an HTML table in a horizontally scrolling box. A column named "verdict" comes
    right after the first (so a phone shows it without scrolling) and is coloured by the
    row's verdict, keeping its words; the first column stays in view while scrolling; cells of
    the `Table.link` column link to the relative path they hold."""
    order = list(range(len(t.header)))
    col = t.header.index("verdict") if "verdict" in t.header and t.verdicts else -1
    if col > 0:
        order = [0, col, *(j for j in order[1:] if j != col)]
    head = "".join(
        f'<th scope="col"{" class=num" if t.numeric[j] else ""}>{html.escape(t.header[j])}</th>'
        for j in order
    )
    body = []
    for i, row in enumerate(t.rows):
        cells = []
        for j in order:
            text = html.escape(row[j])
            if j == 0:
                cells.append(f'<th scope="row">{text}</th>')
            elif j == col:
                cls, symbol = VERDICT_STYLE.get(t.verdicts[i], ("v-none", ""))
                mark = f'<span aria-hidden="true">{symbol}</span> ' if symbol else ""
                cells.append(f'<td class="verdict {cls}">{mark}{text}</td>')
            elif j == t.link and text:
                cells.append(f'<td><a href="{html.escape(row[j], quote=True)}">{text}</a></td>')
            else:
                cells.append(f"<td{' class=num' if t.numeric[j] else ''}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _svg_width_px(svg: bytes) -> float:
    """The SVG's own width in CSS pixels (matplotlib writes it in pt)."""
    m = re.search(rb'<svg[^>]*\swidth="([\d.]+)(pt|px)?"', svg)
    if not m:
        return 640.0
    return float(m.group(1)) * (4 / 3 if m.group(2) == b"pt" else 1.0)


def figure_html(svg_path: Path, alt: str, caption: str) -> str:
    """The SVG inlined as a data URI: full width up to its own size; on a phone at least
    70% of its own size, scrolling sideways, so the labels stay readable."""
    data = svg_path.read_bytes()
    w = _svg_width_px(data)
    uri = "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")
    style = f"--w: {w:.0f}px; --min-w: {min(0.7 * w, 1000):.0f}px"
    return (
        f'<figure><div class="scroll"><img src="{uri}" alt="{html.escape(alt)}" '
        f'style="{style}"></div><figcaption>{inline(caption)}</figcaption></figure>'
    )


def _section(sid: str, title: str, body: str) -> tuple[str, str, str]:
    return sid, title, f'<section id="{sid}"><h2>{html.escape(title)}</h2>{body}</section>'


def _verdict_legend() -> str:
    parts = [
        f'<span class="{cls}">{symbol} {html.escape(v)}</span>'
        for v, (cls, symbol) in VERDICT_STYLE.items()
        if v not in (BASELINE, TOO_FEW)
    ]
    return '<p class="legend">verdict colours (the words say the same): ' + " ".join(parts) + "</p>"


def _figure(key: str, figures: dict[str, Path], out_dir: Path) -> str:
    sid, title, alt = FIGURES[key]
    png = figures[key]
    svg = png.with_suffix(".svg")
    return figure_html(svg, alt, f"{title}; also `{png.relative_to(out_dir)}`")


def sections(
    a: Analysis,
    failures: list,
    fmt: Fmt,
    figures: dict[str, Path],
    out_dir: Path,
    prov: Provenance,
    setup: list[str],
    definitions: str,
    extra: tuple[TableSection, ...] | list[TableSection] = (),
) -> list[tuple[str, str, str]]:
    """``(id, title, html)`` of every section present, in page order (arguments: `render_html`)."""
    out = [
        _section(
            "sensitivity",
            "Sensitivity of this instrument",
            bullets(narrative.sensitivity_lines(a, fmt)),
        )
    ]
    s = a.primary
    out.append(
        _section(
            "verdicts",
            f"Verdicts on '{s.name}'",
            table_html(tables.summary_table(s, fmt))
            + _verdict_legend()
            + bullets(narrative.verdict_sentences(a, s, fmt)),
        )
    )
    if "forest" in figures:
        out.append(_section("forest", FIGURES["forest"][1], _figure("forest", figures, out_dir)))
    out += [table_section(x) for x in extra]
    for key in ("curves", "tokens"):
        if key in figures:
            out.append(_section(key, FIGURES[key][1], _figure(key, figures, out_dir)))
    if len(a.summaries) > 1:
        body = "".join(
            f"<h3>{html.escape(x.name)}</h3>"
            + table_html(tables.summary_table(x, fmt))
            + bullets(narrative.verdict_sentences(a, x, fmt))
            for x in a.summaries[:-1]
        )
        out.append(_section("per-summary", "Per benchmark / domain", body))
        out.append(
            _section(
                "ranking",
                "Ranking",
                table_html(tables.ranking_table(a))
                + "<p>Kendall's tau-b between rankings:</p>"
                + table_html(tables.tau_table(a))
                + bullets(narrative.ranking_sentences(a) + narrative.sign_changes(a)),
            )
        )
    if a.aggregates:
        body = table_html(tables.aggregate_table(a.aggregates, a.baseline, fmt))
        if "profiles" in figures:
            body += _figure("profiles", figures, out_dir)
        out.append(_section("aggregates", "Aggregates over runs × benchmarks", body))
    if "proportions" in figures:
        out.append(
            _section("proportions", "Domain proportions", _figure("proportions", figures, out_dir))
        )
    if failures:
        items = "".join(
            f"<li><strong>{html.escape(f.method)}</strong>, seed {html.escape(f.seed)}: "
            f"<code>{html.escape(f.error)}</code>"
            + (
                f"<details><summary>traceback</summary><pre>{html.escape(f.traceback)}</pre>"
                "</details>"
                if f.traceback
                else ""
            )
            + "</li>"
            for f in failures
        )
        out.append(_section("failures", "Failed runs", f"<ul>{items}</ul>"))
    out.append(_section("setup", "Setup", bullets(setup)))
    out.append(_section("provenance", "How this report was produced", provenance_html(a, prov)))
    out.append(_section("definitions", "Definitions", definitions_html(definitions)))
    return out


def table_section(x: TableSection) -> tuple[str, str, str]:
    """A caller's section (`tables.TableSection`): its lead, table and notes."""
    lead = f"<p>{inline(' '.join(x.lead))}</p>" if x.lead else ""
    notes = f"<p>{inline(' '.join(x.notes))}</p>" if x.notes else ""
    return _section(x.sid, x.title, lead + table_html(x.table) + notes)


def provenance_html(a: Analysis, prov: Provenance) -> str:
    o = a.options
    facts = [
        ("command", f"<code>{html.escape(prov.command)}</code>"),
        ("in", f"<code>{html.escape(prov.cwd)}</code>"),
        ("written", html.escape(prov.written)),
    ]
    if prov.source:
        facts.append(("dataflex-rl source", f"git <code>{html.escape(prov.source)}</code>"))
    facts.append(
        (
            "statistics",
            html.escape(
                f"α = {o.alpha:g}, power {o.power:g}, {o.n_boot} bootstrap resamples, "
                f"{o.n_perm} random sign flips above 16 seeds, seed {o.seed}"
            ),
        )
    )
    facts += [(n, html.escape(v)) for n, v in prov.versions]
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
    )


def definitions_html(text: str) -> str:
    """A markdown list (``- item``, continuation lines indented) as an HTML list."""
    items = [" ".join(part.split()) for part in re.split(r"^- ", text, flags=re.M) if part.strip()]
    return bullets(items)


def render_html(
    a: Analysis,
    title: str,
    failures: list,
    fmt: Fmt,
    figures: dict[str, Path],
    out_dir: Path,
    prov: Provenance,
    setup: list[str],
    definitions: str,
    extra: tuple[TableSection, ...] | list[TableSection] = (),
) -> str:
    """The text of ``report.html``.

    Args:
        a: the analysis.
        title: the report's title.
        failures: the runs that failed (`report.Failure`).
        fmt: how scores are formatted.
        figures: figure key -> PNG path written by `plots` (its SVG lies beside it).
        out_dir: the report's folder (figure captions name the PNG relative to it).
        prov: what produced the report.
        setup: the Setup list of report.md (markdown items).
        definitions: the Definitions of report.md (a markdown list).
        extra: the caller's sections (`ReportInputs.sections`), after the forest plot.
    """
    parts = sections(a, failures, fmt, figures, out_dir, prov, setup, definitions, extra)
    return page(title, " ".join(narrative.headline(a, fmt)), parts)


def page(title: str, headline: str, parts: list[tuple[str, str, str]]) -> str:
    """A whole self-contained page: ``title``, the ``headline`` paragraph (markdown
    sentences), a navigation bar and the ``(id, title, html)`` sections of ``parts``."""
    nav = "".join(f'<li><a href="#{sid}">{html.escape(t)}</a></li>' for sid, t, _ in parts)
    title = html.escape(title)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{title}</title><style>{CSS}</style></head>\n"
        f"<body><main><header><h1>{title}</h1>"
        f'<p class="headline">{inline(headline)}</p>'
        f'<nav aria-label="sections"><ul>{nav}</ul></nav></header>\n'
        + "\n".join(body for _, _, body in parts)
        + "\n</main></body></html>\n"
    )


@dataclass(frozen=True)
class StratumPage:
    """One stratum of an index page (`render_index`).

    Args:
        sid: its section id (letters, digits, ``-``, ``_``, ``.``).
        label: its values, e.g. ``model=qwen, regime=long``.
        href: its own report.html, relative to the index.
        analysis: its `Analysis`.
        fmt: how its scores are shown.
    """

    sid: str
    label: str
    href: str
    analysis: Analysis
    fmt: Fmt


def stratum_section(s: StratumPage) -> tuple[str, str, str]:
    """A stratum's headline, its verdict table on the average (colour and words) and the
    sentences on it, with a link to its full report."""
    a = s.analysis
    body = (
        f'<p class="headline">{inline(" ".join(narrative.headline(a, s.fmt)))}</p>'
        + table_html(tables.summary_table(a.primary, s.fmt))
        + bullets(narrative.verdict_sentences(a, a.primary, s.fmt))
        + f'<p>Full report: <a href="{html.escape(s.href, quote=True)}">'
        f"{html.escape(s.href)}</a></p>"
    )
    return _section(s.sid, s.label, body)


def render_index(
    title: str,
    intro: list[str],
    notes: list[str],
    index: Table,
    strata: list[StratumPage],
    prov: Provenance,
    definitions: str,
) -> str:
    """The text of the top ``report.html`` of a report per stratum (`strata`).

    Args:
        title: the page's title.
        intro: markdown sentences under the title (what was compared).
        notes: notes on reading the table (listed above the index).
        index: one row per stratum (its `Table.link` column: the strata's report.html).
        strata: each stratum's section, in the index's order.
        prov: what produced the report.
        definitions: the Definitions (a markdown list).
    """
    notes_html = bullets([f"note: {n}" for n in notes]) if notes else ""
    parts = [_section("index", "Index", notes_html + table_html(index) + _verdict_legend())]
    parts += [stratum_section(s) for s in strata]
    if strata:
        facts = provenance_html(strata[0].analysis, prov)
        parts.append(_section("provenance", "How this report was produced", facts))
    parts.append(_section("definitions", "Definitions", definitions_html(definitions)))
    return page(title, " ".join(intro), parts)
