"""``compare``: an experiment file -> runs -> results.csv, proportions.csv, report.md, plots."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dataflex_rl.core.config import validate
from dataflex_rl.core.io import atomic_write_json, atomic_write_text
from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.harness.reporting.report import (
    Failure,
    ReportInputs,
    ReportParts,
    prepare_report,
    write_csv,
    write_report_files,
)
from dataflex_rl.harness.running.executors import make_executor
from dataflex_rl.harness.running.experiment import Experiment
from dataflex_rl.harness.running.runner import (
    Execution,
    execute,
    load_done,
    locked_output,
    plan,
    run_tracking,
)
from dataflex_rl.harness.statistics.analysis import Analysis
from dataflex_rl.harness.statistics.results import PROPORTION_COLUMNS, Row, write_results_csv
from dataflex_rl.tracking import TrackingConfig, flatten, prepare_store, require_backends


@dataclass
class CompareResult:
    """What ``compare`` produced."""

    out_dir: Path
    execution: Execution
    analysis: Analysis | None
    runs: int
    #: the report's pieces (None without statistics), for a caller that adds a section
    #: (`report.write_pages`)
    report: ReportParts | None = None
    #: the rows of results.csv (`result_rows`)
    rows: list[Row] = field(default_factory=list)


#: results.csv column of a checkpoint's generation cost so far (`curves.token_curves`)
GENERATED_TOKENS = "generated_tokens"


def result_rows(
    execution: Execution, domains: list[str], metric: str, tokens: bool = False
) -> list[Row]:
    """One row per finished run × domain × evaluation checkpoint; ``score`` is ``metric``;
    with ``tokens`` (an experiment with ``budget.generated_tokens``) each row also carries its
    checkpoint's generation cost (`GENERATED_TOKENS`, for the accuracy-vs-tokens curves)."""
    rows = []
    for r in execution.done:
        for e in r["evals"]:
            for d in domains:
                name = metric_domain(d)
                extra = {k: e[f"{name}/{k}"] for k in ("greedy", "sampled") if f"{name}/{k}" in e}
                if tokens and "tokens" in e:
                    extra[GENERATED_TOKENS] = e["tokens"]
                if metric in extra:
                    score = float(extra[metric])
                    rows.append(
                        Row(r["method"], str(r["seed"]), d, score, d, int(e["step"]), extra)
                    )
    return rows


def proportion_rows(execution: Execution) -> list[dict]:
    return [
        {"method": r["method"], "seed": r["seed"], **p}
        for r in execution.done
        for p in r.get("proportions", [])
    ]


def pairing_check(execution: Execution) -> str:
    """Whether the step-0 evaluation is identical across strategies for every seed."""
    by_seed: dict[int, dict[str, dict]] = {}
    for r in execution.done:
        first = min(r["evals"], key=lambda e: e["step"])
        if first["step"] == 0:
            by_seed.setdefault(r["seed"], {})[r["method"]] = {
                k: v for k, v in first.items() if k.endswith(("/greedy", "/sampled"))
            }
    bad = [
        s
        for s, ev in by_seed.items()
        if len({json.dumps(e, sort_keys=True) for e in ev.values()}) > 1
    ]
    if bad:
        return (
            f"**pairing check FAILED**: the step-0 evaluation differs across strategies for "
            f"seed(s) {', '.join(map(str, sorted(bad)))}; runs are not paired"
        )
    if not by_seed:
        return "pairing check: no step-0 evaluations to compare"
    return (
        "pairing check passed: for each seed the step-0 held-out evaluation is identical "
        "across strategies (same initial policy, same evaluation problems)"
    )


def setup_lines(exp: Experiment, execution: Execution, runs: int) -> list[str]:
    b, e = exp.budget, exp.evaluation
    cpu = sum(r.get("wall_seconds", 0.0) for r in execution.results)
    host, *pairing = exp.host_impl.setup_lines(exp)
    return [
        f"experiment: `{exp.path or exp.name}`"
        + (f": {exp.description}" if exp.description else ""),
        host,
        f"score: {e.metric} held-out accuracy on {e.per_domain} problems per domain, at the "
        f"last checkpoint (learning curves: every {e.every or b.steps} steps)",
        pairing_check(execution),
        *pairing,
        *_control_lines(exp),
        *_warning_lines(execution),
        f"compute: {runs} runs ({execution.skipped} already finished), "
        f"{len(execution.failed)} failed; this invocation {execution.wall_seconds / 60:.1f} "
        f"min wall, run time {cpu / 60:.1f} min summed over runs",
    ]


def _control_lines(exp: Experiment) -> list[str]:
    """One line per control arm: what it is and the outcome it must have."""
    arms = {s.label: s for s in exp.strategies}
    return [
        f"control `{c.label}` ({c.name}, must be {c.outcome}): {c.kind.summary}"
        + (f"; {exp.host} {arms[c.label].overrides}" if arms[c.label].overrides else "")
        for c in exp.controls
    ]


def _warning_lines(execution: Execution) -> list[str]:
    """Warnings raised inside runs: those a dependency raised in every run summarized once per
    package (how many distinct messages, how often; the full text stays in each run's
    done.json), then each other distinct message with the runs it occurred in."""
    where: dict[str, list[str]] = {}
    package: dict[str, str] = {}
    count: dict[str, int] = {}
    for r in execution.done:
        packages = r.get("warning_packages", [])
        for i, w in enumerate(r.get("warnings", [])):
            times, _, message = w.partition("× ")
            where.setdefault(message, []).append(f"{r['method']}/seed{r['seed']}")
            package[message] = packages[i] if i < len(packages) else ""
            count[message] = count.get(message, 0) + int(times)
    n_runs = len(execution.done)
    repeated: dict[str, list[str]] = {}
    for message, seen in where.items():
        if n_runs > 1 and len(seen) == n_runs and package[message] not in ("", "dataflex_rl"):
            repeated.setdefault(package[message], []).append(message)
    summary = [
        f"warnings from {pkg} in every run: {len(ms)} distinct, {sum(count[m] for m in ms)} "
        f"in all (first: {ms[0]}; each run's done.json has them all)"
        for pkg, ms in repeated.items()
    ]
    for ms in repeated.values():
        for m in ms:
            del where[m]
    return summary + [
        f"warning in {len(runs)} run(s) ({', '.join(runs[:4])}"
        + (", ..." if len(runs) > 4 else "")
        + f"): {message}"
        for message, runs in list(where.items())[:5]
    ]


@locked_output
def run_compare(
    exp: Experiment,
    out_dir: str | Path | None = None,
    workers: int | None = None,
    progress: bool = True,
    plots: bool = True,
    train_fn: str | None = None,
    cells: set[tuple[str, int]] | None = None,
    address: str | None = None,
    executor=None,
) -> CompareResult:
    """Run (or resume) the experiment's matrix and write its report. ``cells``: the
    ``(label, seed)`` runs to run and report (None: all); ``executor``: an entered one to use
    (None: the experiment's, entered here); ``train_fn`` None: the host's."""
    if executor is None:
        exp.host_impl.check(exp)  # its settings, Python and data, before any run starts
        with make_executor(exp.executor, exp.resources, workers=workers, address=address) as ex:
            return run_compare(exp, out_dir, workers, progress, plots, train_fn, cells, executor=ex)
    out = Path(out_dir)  # `locked_output` gave the default
    require_backends(exp.tracking, "dataflex-rl compare")  # before any run starts
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(exp, out, train_fn)
    if cells is not None:
        runs = [r for r in runs if (r.method, r.seed) in cells]
    for r in runs:  # a finished run of another configuration: stop before writing anything
        load_done(r)
    executor.start(out)  # e.g. the run folders are on storage every Ray node sees
    atomic_write_json(
        out / "experiment.json",
        {
            "name": exp.name,
            "path": exp.path,
            "baseline": exp.baseline,
            "seeds": exp.seeds,
            "strategies": {s.label: s.to_dict() for s in exp.strategies},
            "controls": exp.control_outcomes,
            "overrides": {s.label: s.overrides for s in exp.strategies if s.overrides},
            "host": exp.host,
            exp.host: runs[0].config,
            **{k: asdict(getattr(exp, k)) for k in ("budget", "evaluation", "statistics")},
            "executor": exp.executor,
            "resources": asdict(exp.resources),
        },
    )
    tracking = run_tracking(exp.tracking, out, "report", exp.name)
    tracking = validate(TrackingConfig, tracking, "tracking")
    prepare_store(tracking)  # the shared MLflow database, before the workers open it
    execution = execute(runs, workers, progress, executor=executor)
    tokens = exp.budget.generated_tokens is not None
    rows = result_rows(execution, exp.domains, exp.evaluation.metric, tokens)
    write_results_csv(rows, out / "results.csv")
    props = proportion_rows(execution)
    write_csv(props, PROPORTION_COLUMNS, out / "proportions.csv", extra="ignore")
    failed = execution.failed
    failures = [
        Failure(r["method"], str(r["seed"]), r["error"], r.get("traceback", "")) for r in failed
    ]
    atomic_write_json(out / "failures.json", execution.failed)
    analysis, report = None, None
    methods = {r.method for r in rows}
    if exp.baseline in methods:
        inputs = ReportInputs(
            title=f"Comparison: {exp.name}",
            baseline=exp.baseline,
            options=exp.statistics,
            setup=setup_lines(exp, execution, len(runs)),
            failures=failures,
            proportions=props,
            plots=plots,
            controls={k: v for k, v in exp.control_outcomes.items() if k in methods},
            tracking=tracking,
            params=flatten(
                {"experiment": exp.name, "seeds": list(exp.seeds)}
                | {k: asdict(getattr(exp, k)) for k in ("budget", "evaluation")}
                | {exp.host: {k: v for k, v in runs[0].config.items() if k != "tracking"}}
            ),
        )
        report = write_report_files(prepare_report(rows, out, inputs))
        analysis = report.analysis
    else:
        atomic_write_text(
            out / "report.md",
            f"# Comparison: {exp.name}\n\nNo statistics: the baseline {exp.baseline!r} has no "
            f"finished run.\n\n"
            + "".join(f"- {f.method} seed {f.seed}: `{f.error}`\n" for f in failures),
        )
    return CompareResult(out, execution, analysis, len(runs), report, rows)
