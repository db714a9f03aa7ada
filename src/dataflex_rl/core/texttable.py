"""Plain-text tables for the terminal, with a header row of labelled column groups.

`text_table` is what ``train`` (side by side), ``compare`` and ``report`` print: the first
column left-aligned, the others right-aligned, and above the column names one label per group
of columns (e.g. "sampled accuracy (decision metric)" over its per-domain columns)::

    >>> print(text_table([("", ["strategy"]), ("sampled", ["math", "mean"])],
    ...                  [["baseline", "0.360", "0.283"]]))
              sampled
    strategy   math   mean
    --------  -----  -----
    baseline  0.360  0.283
"""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "


def text_table(groups: Sequence[tuple[str, Sequence[str]]], rows: Sequence[Sequence]) -> str:
    """Format ``rows`` under grouped column names.

    ``groups``: ``(label, column names)`` in order, a label spanning its columns ("" for
    none); ``rows``: one cell per column each (ValueError otherwise), shown with ``str``.
    """
    names = [c for _, cols in groups for c in cols]
    cells = [[str(v) for v in r] for r in rows]
    for r in cells:
        if len(r) != len(names):
            raise ValueError(f"text_table: a row has {len(r)} cells for {len(names)} columns")
    widths = [max(len(x) for x in col) for col in zip(names, *cells)]
    start = 0
    for label, cols in groups:  # room for each group's label over its columns
        span = range(start, start + len(cols))
        room = sum(widths[i] for i in span) + len(GAP) * (len(cols) - 1)
        if cols and len(label) > room:
            widths[span[-1]] += len(label) - room
        start += len(cols)

    def line(r: Sequence[str]) -> str:
        return GAP.join(
            v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))
        ).rstrip()

    head, start = [], 0
    for label, cols in groups:
        span = widths[start : start + len(cols)]
        head.append(label.ljust(sum(span) + len(GAP) * (len(cols) - 1)))
        start += len(cols)
    top = GAP.join(head).rstrip()
    body = [line(names), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    return "\n".join(([top] if top else []) + body)
