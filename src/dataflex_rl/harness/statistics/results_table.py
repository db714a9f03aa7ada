"""Results tables as people have them: long or wide, one comparison per stratum.

Long (a row per run × benchmark) or wide (a row per run, a column per benchmark); ``by``
columns split rows into strata: docs/harness.md, "External results". Every refusal names the
file, the line and the column.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.harness.statistics.results import (
    REQUIRED,
    Row,
    parse_row,
    parse_step,
    seed_label,
    seed_sort_key,
)

#: columns of a wide table that are never benchmarks, whatever they hold
DESCRIPTIVE = ("run_id", "campaign", "model", "method", "seed", "step", "steps", "regime")
LONG, WIDE = "long", "wide"
#: how an empty ``by`` cell reads in a stratum's label
EMPTY = "(empty)"
#: a stratum's values: ``((column, value), ...)`` of the ``by`` columns, ``""`` for an empty one
StratumKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Stratum:
    """The rows of one comparison; ``key`` is ``((column, value), ...)`` over ``by`` ("" for
    an empty value; ``()`` without ``by``)."""

    key: StratumKey
    rows: list[Row]

    @property
    def label(self) -> str:
        """``model=qwen, regime=long`` (``all`` without ``by`` columns; an empty value reads
        `EMPTY`)."""
        return ", ".join(f"{c}={v or EMPTY}" for c, v in self.key) or "all"

    @property
    def methods(self) -> list[str]:
        """Its methods in first-seen order."""
        return list(dict.fromkeys(r.method for r in self.rows))

    @property
    def values(self) -> dict[str, str]:
        return dict(self.key)


@dataclass
class ResultsTable:
    """A results file (or ``BACKEND:LOCATION`` of a tracker store) read into strata, sorted by
    the ``by`` columns; ``notes``: what was left out or assumed, a line each."""

    path: Path | str
    layout: str
    by: tuple[str, ...]
    benchmarks: list[str]
    strata: list[Stratum]
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [r for s in self.strata for r in s.rows]


def read_results_csv(path: str | Path) -> list[Row]:
    """Rows of a long results CSV (ConfigError names the line and column of a bad value)."""
    return read_table(path, wide=False).rows


def read_table(
    path: str | Path,
    *,
    wide: bool | None = None,
    by: tuple[str, ...] | list[str] = (),
    scale: float = 1.0,
    domains: dict[str, str] | None = None,
) -> ResultsTable:
    """Read a long or wide (``wide`` None: detect) results CSV into strata; ConfigError on a
    missing file or column, a bad cell, a duplicate result, no rows."""
    p = Path(path)
    header, records = _read_records(p)
    return _table(p, header, records, wide, tuple(by), scale, domains)


def read_frame(
    frame,
    *,
    wide: bool | None = None,
    by: tuple[str, ...] | list[str] = (),
    scale: float = 1.0,
    domains: dict[str, str] | None = None,
) -> ResultsTable:
    """`read_table` of a pandas DataFrame in the same layouts, with the same checks: each
    cell is read as its text (a missing value as an empty cell), and errors name the row by
    its position (``DataFrame:3`` is ``frame.iloc[3]``)."""
    header = [str(c).strip() for c in frame.columns]
    cells = frame.astype(object).where(frame.notna(), "").to_numpy()
    records = [(i, {h: str(v).strip() for h, v in zip(header, row)}) for i, row in enumerate(cells)]
    records = [(i, rec) for i, rec in records if any(rec.values())]  # as a CSV's blank lines
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise ConfigError(f"DataFrame: column(s) {', '.join(dup)} appear more than once")
    return _table("DataFrame", header, records, wide, tuple(by), scale, domains)


def _table(
    p: Path | str,
    header: list[str],
    records: list[tuple[int, dict]],
    wide: bool | None,
    by: tuple[str, ...],
    scale: float,
    domains: dict[str, str] | None,
) -> ResultsTable:
    """The strata of ``records`` (line number, {column: text}) under ``header``."""
    layout = _layout(p, header, wide)
    _check_by(p, header, by)
    if not records:
        raise ConfigError(f"{p}: no result rows")
    notes: list[str] = []
    if layout == WIDE:
        benchmarks, notes = _benchmark_columns(p, header, records, by, domains)
        cells = _melt(p, records, by, benchmarks, domains or {})
    else:
        cells = [
            (
                line,
                _key(rec, by),
                parse_row({k: v for k, v in rec.items() if k not in by}, f"{p}:{line}"),
            )
            for line, rec in records
        ]
        cells, benchmarks, notes = _in_domains(cells, domains, f"{p}: benchmarks")
    cells = _scaled(cells, scale)
    _refuse_duplicates(p, cells, records, by, layout)
    if not cells:
        raise ConfigError(f"{p}: no result rows")
    return ResultsTable(p, layout, by, benchmarks, _strata(cells), notes)


def table_of_rows(
    rows: list[Row],
    source: str,
    *,
    by: tuple[str, ...] = (),
    keys: list[StratumKey] | None = None,
    scale: float = 1.0,
    domains: dict[str, str] | None = None,
) -> ResultsTable:
    """Rows read elsewhere (a tracker store) into strata as `read_table` makes them:
    ``keys[i]`` is the stratum of ``rows[i]`` (None: one stratum). Duplicates are the reader's
    to refuse; ConfigError on no rows or a bad ``scale`` or ``domains``."""
    keys = [()] * len(rows) if keys is None else keys
    if len(keys) != len(rows) or any(tuple(c for c, _ in k) != tuple(by) for k in keys):
        raise ValueError("table_of_rows: one key over the `by` columns per row")
    cells, benchmarks, notes = _in_domains([(0, k, r) for k, r in zip(keys, rows)], domains, source)
    cells = _scaled(cells, scale)
    if not cells:
        raise ConfigError(f"{source}: no result rows")
    return ResultsTable(source, LONG, tuple(by), benchmarks, _strata(cells), notes)


def _strata(cells: list[tuple[int, StratumKey, Row]]) -> list[Stratum]:
    """One `Stratum` per key of ``cells``, sorted by its values (numbers as numbers; an empty
    value before any other text)."""
    groups: dict[StratumKey, list[Row]] = {}
    for _, k, r in cells:
        groups.setdefault(k, []).append(r)
    order = sorted(groups, key=lambda k: [seed_sort_key(v) for _, v in k])
    return [Stratum(k, groups[k]) for k in order]


def _in_domains(cells: list, domains: dict[str, str] | None, what: str) -> tuple[list, list, list]:
    """(cells of the benchmarks in ``domains`` with their domain, benchmarks, notes)."""
    benchmarks = list(dict.fromkeys(r.benchmark for _, _, r in cells))
    if domains is None:
        return cells, benchmarks, []
    _check_domains(domains, benchmarks, what)
    left = [b for b in benchmarks if b not in domains]
    kept = [
        (n, k, replace(r, domain=domains[r.benchmark]))
        for n, k, r in cells
        if r.benchmark in domains
    ]
    notes = [f"benchmarks not in --domains, left out: {', '.join(left)}"] if left else []
    return kept, [b for b in benchmarks if b in domains], notes


def _scaled(cells: list, scale: float) -> list:
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"--scale {scale!r}: must be a positive number (0.01 for percent)")
    if scale == 1.0:
        return cells
    return [(n, k, replace(r, score=r.score * scale)) for n, k, r in cells]


def _read_records(p: Path) -> tuple[list[str], list[tuple[int, dict]]]:
    """(header, [(line number, {column: stripped cell})]); a short row's missing cells are
    empty, a row with more non-empty fields than the header is refused."""
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    with p.open(newline="", encoding="utf-8-sig") as f:  # a leading BOM (Excel) is dropped
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise ConfigError(f"{p}: column(s) {', '.join(dup)} appear more than once")
        records = []
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            if len(cells) > len(header) and any(c.strip() for c in cells[len(header) :]):
                raise ConfigError(
                    f"{p}:{reader.line_num}: {len(cells)} fields for {len(header)} columns"
                )
            cells = cells + [""] * (len(header) - len(cells))  # a short row: empty cells
            records.append((reader.line_num, {h: c.strip() for h, c in zip(header, cells)}))
    return header, records


def _layout(p: Path | str, header: list[str], wide: bool | None) -> str:
    long_ok = all(c in header for c in REQUIRED)
    # a benchmark or score column without the other is a long table missing a column
    looks_long = "benchmark" in header or "score" in header
    if wide is False or (wide is None and looks_long):
        if not long_ok:
            missing = [c for c in REQUIRED if c not in header]
            raise ConfigError(
                f"{p}: missing column(s) {', '.join(missing)}; a long results CSV needs "
                f"{', '.join(REQUIRED)} (optional: domain, step); found "
                f"{', '.join(header) or 'no header'}"
            )
        return LONG
    missing = [c for c in ("method", "seed") if c not in header]
    if missing:
        raise ConfigError(
            f"{p}: missing column(s) {', '.join(missing)}; a results CSV is long "
            f"({', '.join(REQUIRED)}[, domain, step]) or wide (method, seed, then one "
            f"numeric column per benchmark); found {', '.join(header) or 'no header'}"
        )
    return WIDE


def _check_by(p: Path | str, header: list[str], by: tuple[str, ...]) -> None:
    for col in by:
        if col not in header:
            raise ConfigError(
                f"--by {col}: not a column of {p}.{suggest(col, header)} "
                f"Columns: {', '.join(header)}"
            )
        if col in ("method", "seed", "benchmark", "score", "step"):
            raise ConfigError(
                f"--by {col}: {col} is part of every comparison; --by takes the columns "
                "that tell comparisons apart (e.g. model, campaign, regime)"
            )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _benchmark_columns(
    p: Path | str,
    header: list[str],
    records: list[tuple[int, dict]],
    by: tuple[str, ...],
    domains: dict[str, str] | None,
) -> tuple[list[str], list[str]]:
    """(benchmark columns, notes) of a wide table."""
    found, text = [], []
    for col in header:
        if col in DESCRIPTIVE or col in by:
            continue
        cells = [(line, rec[col]) for line, rec in records if rec[col]]
        bad = [(line, v) for line, v in cells if not _is_number(v)]
        if not cells or len(bad) == len(cells):
            text.append(col)  # descriptive text (or empty)
        elif bad and (domains is None or col in domains):
            line, v = bad[0]
            raise ConfigError(
                f"{p}:{line}: column {col!r} holds {v!r}, not a number, while its other "
                "cells are numbers: a benchmark column holds scores only (an empty cell is "
                "a missing score)"
            )
        elif not bad:
            found.append(col)
    notes = []
    if domains is not None:
        _check_domains(domains, found, f"{p}: numeric columns")
        left = [c for c in found if c not in domains]
        found = [c for c in found if c in domains]
        if left:
            notes.append(f"numeric columns not in --domains, left out: {', '.join(left)}")
    if not found:
        raise ConfigError(
            f"{p}: no benchmark columns: a wide table has one numeric column per benchmark "
            f"besides {', '.join(DESCRIPTIVE)}; found {', '.join(header)}"
        )
    if text:
        notes.append(f"descriptive columns (not benchmarks): {', '.join(text)}")
    return found, notes


def _key(rec: dict, by: tuple[str, ...]) -> StratumKey:
    return tuple((col, rec[col]) for col in by)


def _melt(
    p: Path | str,
    records: list[tuple[int, dict]],
    by: tuple[str, ...],
    benchmarks: list[str],
    domains: dict[str, str],
) -> list[tuple[int, tuple, Row]]:
    """One (line, stratum key, Row) per non-empty benchmark cell of every record."""
    out = []
    for line, rec in records:
        where = f"{p}:{line}"
        for col in ("method", "seed"):
            if not rec[col]:
                raise ConfigError(f"{where}: empty {col!r}")
        key = _key(rec, by)
        seed, step = seed_label(rec["seed"], where), parse_step(rec.get("step"), where)
        for b in benchmarks:
            if not rec[b]:
                continue
            v = float(rec[b])
            if not math.isfinite(v):
                raise ConfigError(f"{where}: {b} is {rec[b]!r}; leave the cell empty instead")
            out.append((line, key, Row(rec["method"], seed, b, v, domains.get(b, ""), step)))
    return out


def _refuse_duplicates(
    p: Path | str, cells: list[tuple[int, tuple, Row]], records, by: tuple[str, ...], layout: str
) -> None:
    """Two cells with one (stratum, method, seed, benchmark, step): name both lines and the
    columns in which their rows differ (what ``--by`` may be missing)."""
    seen: dict[tuple, int] = {}
    lines = dict(records)
    for line, key, r in cells:
        k = (key, r.method, r.seed, r.benchmark, r.step)
        first = seen.setdefault(k, line)
        if first == line:
            continue
        a, b = lines[first], lines[line]
        keep = {"run_id", "benchmark", "score", "step", *by}
        keep |= {"domain"} if layout == LONG else set()
        differ = [c for c in a if c not in keep and a[c] != b[c] and not _is_number_pair(a, b, c)]
        runs = f" (run_id {a['run_id']} and {b['run_id']})" if a.get("run_id") else ""
        where = ", ".join(
            [f"{c}={v}" for c, v in key]
            + [f"method={r.method}", f"seed={r.seed}", f"benchmark={r.benchmark}"]
            + ([f"step={r.step}"] if r.step is not None else [])
        )
        hint = "the rows are the same result twice"
        if differ:
            hint = f"the rows differ in {', '.join(differ)}: add the column that tells them "
            hint += "apart to --by (a checkpoint column is called step)"
        raise ConfigError(
            f"{p}: duplicate result {where} at lines {first} and {line}{runs}; {hint}"
        )


def _is_number_pair(a: dict, b: dict, col: str) -> bool:
    """Numeric cells (other benchmarks' scores) do not tell runs apart."""
    return col not in DESCRIPTIVE and _is_number(a[col] or "0") and _is_number(b[col] or "0")


def read_domains(path: str | Path) -> dict[str, str]:
    """benchmark -> domain from YAML (``domain: [benchmark, ...]`` or ``benchmark: domain``)
    or a CSV with columns ``benchmark, domain``; ConfigError otherwise or on a repeat."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--domains {path}: no such file")
    pairs: list[tuple[str, str]] = []
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            cols = [c.strip() for c in reader.fieldnames or []]
            if not {"benchmark", "domain"} <= set(cols):
                raise ConfigError(
                    f"--domains {path}: a CSV needs columns benchmark, domain; found "
                    f"{', '.join(cols) or 'no header'}"
                )
            reader.fieldnames = cols
            pairs = [((r["benchmark"] or "").strip(), (r["domain"] or "").strip()) for r in reader]
    else:
        from dataflex_rl.core.spec import load_yaml

        data = load_yaml(p)
        if not isinstance(data, dict) or not data:
            raise ConfigError(
                f"--domains {path}: expected a mapping, domain: [benchmark, ...] or "
                "benchmark: domain"
            )
        for k, v in data.items():
            if isinstance(v, list):
                pairs += [(str(b), str(k)) for b in v]
            elif isinstance(v, (str, int, float)):
                pairs.append((str(k), str(v)))
            else:
                raise ConfigError(
                    f"--domains {path}: {k}: expected a list of benchmarks or a domain name"
                )
    out: dict[str, str] = {}
    for b, d in pairs:
        if not b or not d:
            raise ConfigError(f"--domains {path}: an empty benchmark or domain name")
        if out.setdefault(b, d) != d:
            raise ConfigError(f"--domains {path}: {b} is in two domains, {out[b]} and {d}")
    return out


def _check_domains(domains: dict[str, str], benchmarks: list[str], what: str) -> None:
    unknown = [b for b in domains if b not in benchmarks]
    if unknown:
        b = unknown[0]
        raise ConfigError(
            f"--domains: {', '.join(unknown)} not among the {what}.{suggest(b, benchmarks)} "
            f"They are: {', '.join(benchmarks)}"
        )


def slug(stratum: Stratum) -> str:
    """A folder name for a stratum: its values joined by ``_`` (unsafe characters as ``-``; an
    empty value as ``no-<column>``)."""
    text = "_".join(v or f"no-{c}" for c, v in stratum.key) or "all"
    return re.sub(r"[^A-Za-z0-9._+=-]+", "-", text).strip("-.") or "stratum"
