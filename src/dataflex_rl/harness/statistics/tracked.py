"""Result rows from a tracker store: ``dataflex-rl report --from-tracker BACKEND:LOCATION``.

The runs of a store (`dataflex_rl.tracking.stores`) are selected and named (`TrackerQuery`),
and their metrics become the rows and strata a CSV gives (`results_table.table_of_rows`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.harness.statistics.results import Row, seed_label
from dataflex_rl.harness.statistics.results_table import EMPTY, StratumKey
from dataflex_rl.tracking.runs import FAILED, TrackedRun
from dataflex_rl.tracking.stores import parse_source, read_runs, require_reader

#: what ``tracking:`` writes: the method is tagged ``strategy``, the seed ``seed``, the compared
#: accuracy ``metric``, and the engine's held-out accuracies are ``eval/<domain>/<metric>``
#: (``eval/mean/...`` averages them). ``METRICS`` (None) means: the runs' own metric.
METHOD_FIELD, SEED_FIELD, METRIC_FIELD = "strategy", "seed", "metric"
METRICS, EXCLUDE = None, ("eval/mean/*",)
ENGINE_METRICS = ("sampled", "greedy")  # without a metric tag: the first the runs logged
_RUN_ATTRIBUTES = ("name", "id", "group", "experiment")


@dataclass(frozen=True)
class TrackerQuery:
    """Which runs of which store (``BACKEND:LOCATION``), and how they become rows: the
    options of ``report --from-tracker`` (``--help`` says what each selects)."""

    source: str
    experiment: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    method_field: str = METHOD_FIELD
    seed_field: str = SEED_FIELD
    metrics: str | None = METRICS
    exclude: tuple[str, ...] = EXCLUDE
    step: int | None = None
    by: tuple[str, ...] = ()


@dataclass
class TrackerResults:
    """The rows read, the runs used, Setup lines, and ``keys[i]`` the stratum of ``rows[i]``
    (as `results_table.table_of_rows` takes them)."""

    rows: list[Row]
    runs: list[TrackedRun]
    setup: list[str]
    keys: list[StratumKey]


def benchmark_namer(pattern: str, exclude: Sequence[str] = ()) -> Callable[[str], str | None]:
    """``key -> benchmark name`` for keys ``pattern`` matches and no ``exclude`` glob does
    (else None): a glob's part between its first and last wildcard, a ``re:REGEX``'s
    ``benchmark`` group, else its first group, else the whole key."""
    if pattern.startswith("re:"):
        try:
            regex = re.compile(pattern[3:])
        except re.error as e:
            raise ConfigError(f"--metrics {pattern!r}: not a regular expression ({e})") from None
        group = "benchmark" if "benchmark" in regex.groupindex else 1 if regex.groups else 0

        def match(key: str) -> str | None:
            m = regex.fullmatch(key)
            return (m.group(group) or key) if m else None

    else:
        head, tail = _literal_ends(pattern)

        def match(key: str) -> str | None:
            found = fnmatch.fnmatchcase(key, pattern)
            return (key[len(head) : len(key) - len(tail)] or key) if found else None

    return lambda key: None if any(fnmatch.fnmatchcase(key, x) for x in exclude) else match(key)


def _literal_ends(pattern: str) -> tuple[str, str]:
    """The text of a glob before its first wildcard and after its last (``*``, ``?`` or a
    ``[...]`` set); ``("", "")`` without wildcards."""
    first = last = None
    i = 0
    while i < len(pattern):
        end, wild = i + 1, pattern[i] in "*?"
        if pattern[i] == "[":  # a set, if it closes (a ']' right after '[' is in the set)
            close = pattern.find("]", i + 2)
            end, wild = (close + 1, True) if close > 0 else (end, False)
        if wild:
            first = i if first is None else first
            last = end
        i = end
    if first is None:
        return "", ""
    return pattern[:first], pattern[last:]


def run_value(run: TrackedRun, name: str) -> str | None:
    """Field ``name`` of ``run``: a parameter, config value or tag, else the run's own
    ``name``, ``id``, ``group`` or ``experiment``."""
    if name in run.fields:
        return run.fields[name]
    return getattr(run, name) if name in _RUN_ATTRIBUTES else None


def field_reader(spec: str, option: str) -> Callable[[TrackedRun], str]:
    """``run -> value`` of ``FIELD`` or ``FIELD~REGEX`` (``option`` names the flag in errors,
    which name the run and the field)."""
    name, sep, pattern = spec.partition("~")
    if not name:
        raise ConfigError(f"{option} {spec!r}: no field name")
    try:
        regex = re.compile(pattern) if sep else None
    except re.error as e:
        raise ConfigError(f"{option} {spec!r}: not a regular expression ({e})") from None

    def read(run: TrackedRun) -> str:
        value = run_value(run, name)
        if value is None or value == "":
            have = ", ".join(sorted(run.fields)[:12]) or "none"
            raise ConfigError(
                f"{run.where}: no field {name!r} ({option}); its fields: {have}"
                + (" ..." if len(run.fields) > 12 else "")
            )
        if regex is None:
            return value
        m = regex.search(value)
        if m is None:
            raise ConfigError(f"{run.where}: {name} {value!r} does not match {option} {spec!r}")
        return m.group(1) if regex.groups else m.group(0)

    return read


def matches(run: TrackedRun, query: TrackerQuery) -> bool:
    """Whether ``run`` passes the query's group and tag filters."""
    if query.group is not None and run.group != query.group:
        return False
    for tag in query.tags:
        key, sep, value = tag.partition("=")
        if not (run_value(run, key) == value if sep else tag in run.labels):
            return False
    return True


def read_tracker(query: TrackerQuery, purpose: str = "dataflex-rl report") -> TrackerResults:
    """The result rows of the runs ``query`` selects (ConfigError on no run, a missing or bad
    field, or two runs of one stratum giving the same method, seed and benchmark)."""
    backend, location = parse_source(query.source)
    require_reader(backend, location, purpose)
    patterns = [query.metrics] if query.metrics else [f"eval/*/{m}" for m in ENGINE_METRICS]
    namers = [benchmark_namer(p, query.exclude) for p in patterns]
    method_of = field_reader(query.method_field, "--method-field")
    seed_of = field_reader(query.seed_field, "--seed-field")
    _check_by(query)
    keep = lambda k: any(n(k) for n in namers)  # noqa: E731
    found = read_runs(backend, location, experiment=query.experiment, keep=keep)
    chosen = [r for r in found if matches(r, query)]
    if not chosen:
        raise ConfigError(_nothing_matched(query, found))
    if query.metrics is None:
        query = dataclasses.replace(query, metrics=default_metrics(chosen, query.source))
    name = benchmark_namer(query.metrics, query.exclude)
    # the readers load only matching keys; matching again keeps this independent of them
    scores = {id(r): {k: v for k, v in r.metrics.items() if v and name(k)} for r in chosen}
    failed = [r for r in chosen if r.status == FAILED]
    empty = [r for r in chosen if r.status != FAILED and not scores[id(r)]]
    used = [r for r in chosen if r.status != FAILED and scores[id(r)]]
    if not used:
        raise ConfigError(
            f"{query.source}: no selected run has a finite metric matching --metrics "
            f"{query.metrics!r}"
            + _excluding(query)
            + f" ({len(chosen)} runs selected"
            + (f", {len(failed)} failed" if failed else "")
            + ")"
        )
    _check_by_present(query, used)
    rows, keys, origin = [], [], {}
    for run in used:
        method, seed = method_of(run), seed_label(seed_of(run), run.where)
        stratum = stratum_key(run, query.by)
        for key, series in scores[id(run)].items():
            bench = name(key)
            other = origin.setdefault((stratum, method, seed, bench), run)
            if other is not run:
                where = ", ".join(f"{c}={v or EMPTY}" for c, v in stratum)
                raise ConfigError(
                    f"{other.where} and {run.where} are both method {method!r} seed {seed} "
                    f"on benchmark {bench!r}"
                    + (f" in stratum {where}" if where else "")
                    + "; narrow the runs (--experiment, --group, --tag), check --method-field "
                    "/ --seed-field, or add the field that tells them apart to --by"
                )
            points = _points(run, key, series, query.step)
            rows.extend(Row(method, seed, bench, v, "", s) for s, v in points)
            keys.extend([stratum] * len(points))
    setup = [_source_line(query, used)]
    for runs, why in ((failed, "the tracker marks them failed"), (empty, "no matching metric")):
        if runs:
            shown = ", ".join(r.name for r in runs[:6]) + (" ..." if len(runs) > 6 else "")
            setup.append(f"skipped {len(runs)} run(s) ({why}): {shown}")
    return TrackerResults(rows, used, setup, keys)


def stratum_key(run: TrackedRun, by: Sequence[str]) -> StratumKey:
    """``((field, value), ...)`` of ``run`` over the ``by`` fields (`run_value`); ``""`` where
    the run has no such field or an empty value (the ``(empty)`` stratum)."""
    return tuple((f, run_value(run, f) or "") for f in by)


def _check_by(query: TrackerQuery) -> None:
    """A ``by`` field that names the method or the seed would compare nothing: refused."""
    for f in query.by:
        for flag, spec in (
            ("--method-field", query.method_field),
            ("--seed-field", query.seed_field),
        ):
            if f == spec.partition("~")[0]:
                raise ConfigError(
                    f"--by {f}: the field {flag} reads ({spec}), part of every comparison; "
                    "--by takes the fields that tell comparisons apart (e.g. model, regime)"
                )


def _check_by_present(query: TrackerQuery, used: list[TrackedRun]) -> None:
    """A ``by`` field no used run has is refused, as a ``--by`` column a CSV lacks is (a typo
    would otherwise put every run in one ``(empty)`` stratum)."""
    for f in query.by:
        if any(run_value(r, f) is not None for r in used):
            continue
        have = sorted({k for r in used for k in r.fields}) + list(_RUN_ATTRIBUTES)
        raise ConfigError(
            f"--by {f}: none of the {len(used)} runs used has this field.{suggest(f, have)} "
            "Their fields: " + ", ".join(have[:16]) + (" ..." if len(have) > 16 else "")
        )


def default_metrics(runs: Sequence[TrackedRun], source: str) -> str:
    """``eval/*/<metric>`` of the runs' ``metric`` tag, else the first of sampled, greedy any
    run logged; ConfigError for runs tagged with different metrics."""
    tagged = {r.fields[METRIC_FIELD] for r in runs if r.fields.get(METRIC_FIELD) in ENGINE_METRICS}
    if len(tagged) > 1:
        raise ConfigError(
            f"{source}: the selected runs are compared on different metrics "
            f"({', '.join(sorted(tagged))}); choose one with --metrics 'eval/*/<metric>' "
            "or narrow the runs"
        )
    if tagged:
        return f"eval/*/{tagged.pop()}"
    logged = {k.rsplit("/", 1)[-1] for r in runs for k in r.metrics if k.startswith("eval/")}
    return next((f"eval/*/{m}" for m in ENGINE_METRICS if m in logged), "eval/*/greedy")


def _points(run: TrackedRun, key: str, series: dict, step: int | None) -> list[tuple]:
    """``(step, value)`` of one metric: every step in order, or the one asked for."""
    if step is None:
        return sorted(series.items(), key=lambda sv: -1 if sv[0] is None else sv[0])
    if step not in series:
        steps = ", ".join(str(s) for s in sorted(s for s in series if s is not None))
        raise ConfigError(
            f"{run.where}: no value of {key!r} at --step {step} (its steps: {steps or 'none'})"
        )
    return [(step, series[step])]


def _excluding(query: TrackerQuery) -> str:
    return f" (excluding {', '.join(query.exclude)})" if query.exclude else ""


def _source_line(query: TrackerQuery, used: list[TrackedRun]) -> str:
    step = f"at step {query.step}" if query.step is not None else "every step"
    filters = [
        f"{flag} {value}"
        for flag, value in (("--experiment", query.experiment), ("--group", query.group))
        if value is not None
    ] + [f"--tag {t}" for t in query.tags]
    return (
        f"results: {len(used)} runs of `{query.source}`"
        + (f" ({' '.join(filters)})" if filters else "")
        + f"; method = field `{query.method_field}`, seed = field `{query.seed_field}`; "
        + ("strata by " + ", ".join(f"field `{f}`" for f in query.by) + "; " if query.by else "")
        + f"benchmarks = metrics `{query.metrics}`{_excluding(query)}, {step}"
        + (" (the last is the final score)" if query.step is None else "")
    )


def _nothing_matched(query: TrackerQuery, found: list[TrackedRun]) -> str:
    """The error when no run passes the filters: what the store holds instead."""
    if not found:
        where = f" in experiment {query.experiment!r}" if query.experiment else ""
        return f"{query.source}: no runs{where}"
    groups = sorted({r.group for r in found if r.group})
    labels = sorted({t for r in found for t in r.labels})
    return (
        f"{query.source}: none of its {len(found)} runs matched"
        + (f" --group {query.group}" if query.group is not None else "")
        + "".join(f" --tag {t}" for t in query.tags)
        + f"; groups: {', '.join(groups) or 'none'}"
        + f"; tags: {', '.join(labels[:12]) or 'none'}"
        + (" ..." if len(labels) > 12 else "")
    )
