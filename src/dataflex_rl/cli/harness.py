"""``dataflex-rl compare``, ``report``, ``gate`` and ``replay``: ``register_commands(subparsers)``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

COMPARE_HELP = """\
Run an experiment: every strategy × every seed on the experiment's host ('host', default the
embedded engine; docs/hosts/compare.md), paired by seed (same initial policy, same evaluation
problems, same prompt stream where the strategy allows), in parallel; then write report.md
(tables and generated sentences), report.html (the same as one self-contained page),
results.csv (one row per run × domain × checkpoint), statistics.csv and plots/ under --out.
Resumable: run the same command again and finished runs are skipped, interrupted runs continue
from their checkpoint. A failed run is reported with its error; the others go on.
Controls (--control, or the experiment's 'controls' key) add arms whose outcome is known: aa
(the baseline under another noise stream: must be no different), no_update, half_lr and
drop_half (planted harms: must be worse). See docs/controls.md.
--until-decided adds seeds in rounds until every comparison is decided by an anytime-valid rule
(better, worse, or equivalent within --margin), at most --max-seeds; later rounds run only the
baseline, the comparisons still undecided and the controls.
--executor ray runs each run as a Ray task (resources.cpus_per_run, gpus_per_run, custom) on the
cluster at --address (default: $RAY_ADDRESS, else a local cluster); --out must be on storage every
node sees (checked before anything is submitted). See docs/cluster.md.
Example: dataflex-rl compare configs/experiments/quick.yaml --seeds 6 --control no_update"""

REPORT_HELP = """\
The statistics and report of 'compare' for results produced elsewhere (e.g. verl campaigns on
GPUs). A long CSV has the columns method, seed, benchmark, score; optional: domain (groups
benchmarks) and step (checkpoint; the last is the final score). A wide CSV (a paper's release
table) has one row per run: method, seed, descriptive columns (run_id, campaign, model, steps,
regime, any text) and one numeric column per benchmark; it is detected, or say --wide. Runs of
different methods with the same seed label are paired; --by makes one comparison per stratum
(an empty cell is a value of its own, labelled (empty)).
Example: dataflex-rl report --from-csv campaign.csv --baseline grpo --out campaign_report
Example: dataflex-rl report --from-csv release.csv --by model,campaign,regime --scale 0.01
  --domains domains.yaml --baseline grpo
--from-tracker BACKEND:LOCATION reads the runs of a tracker store instead: mlflow:URI (an MLflow
tracking URI, e.g. sqlite:///runs/compare/quick/mlflow.db), tensorboard:DIR (every event folder
below DIR) or wandb:DIR (every W&B run folder below DIR, offline runs included). Select runs
with --experiment / --group / --tag, name the fields holding the method and the seed, and the
metrics that are benchmarks; the defaults read what a 'tracking:' section writes
(docs/tracking.md); --by splits the runs by fields (a run without the field is in its (empty)
stratum). Example: dataflex-rl report --from-tracker wandb:runs/compare/quick \
  --group quick --out quick_from_wandb"""


def _cmd_compare(args: argparse.Namespace) -> int:
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.harness.running.compare import run_compare
    from dataflex_rl.harness.running.experiment import load_experiment
    from dataflex_rl.harness.running.runner import plan

    exp = load_experiment(
        args.experiment, args.control or (), seeds=args.seeds, dotted=args.overrides or ()
    )
    if args.executor is not None:
        exp = dataclasses.replace(exp, executor=args.executor)
    if args.address is not None and exp.executor != "ray":
        raise ConfigError("--address names a Ray cluster: it goes with --executor ray")
    out = Path(args.out or Path("runs") / "compare" / exp.name)
    if not args.until_decided and (args.max_seeds, args.round, args.margin) != (None,) * 3:
        raise ConfigError("--max-seeds, --round and --margin go with --until-decided")
    if args.until_decided and args.seeds is not None:
        raise ConfigError(
            "--seeds and --until-decided exclude each other (--until-decided "
            "adds seeds itself, up to --max-seeds)"
        )
    if args.until_decided and args.max_seeds is None:
        raise ConfigError("--until-decided needs --max-seeds N (the most seeds to run)")
    if not args.dry_run:
        if exp.executor == "ray":
            from dataflex_rl.deps import require

            require("ray", "dataflex-rl compare --executor ray")
        _check_dependencies(args, plan(exp, out), "dataflex-rl compare")
    if args.dry_run:
        for r in plan(exp, out):
            extra = f"  {exp.host} {r.overrides}" if r.overrides else ""
            print(f"{r.method:<18} seed {r.seed:<4} -> {r.out_dir}{extra}")
        return 0
    run = {"workers": args.workers, "progress": not args.no_progress, "plots": not args.no_plots}
    run["address"] = args.address
    if args.until_decided:
        from dataflex_rl.harness.running.until_decided import run_until_decided

        margin = 0.02 if args.margin is None else args.margin
        res, seq = run_until_decided(
            exp, out, max_seeds=args.max_seeds, round_size=args.round or 2, margin=margin, **run
        )
        print(
            f"stopped: {seq.stopped} after {len(seq.seeds)} seeds"
            + (f" (a fixed-n design needs {seq.fixed_n})" if seq.fixed_n else "")
        )
    else:
        res = run_compare(exp, out, **run)
    _print_summary(res.report, out)
    ex = res.execution
    print(
        f"{res.runs} runs: {len(ex.done)} finished ({ex.skipped} skipped as already done), "
        f"{len(ex.failed)} failed; wall {ex.wall_seconds / 60:.1f} min"
    )
    for f in ex.failed:
        print(f"  FAILED {f['method']} seed {f['seed']}: {f['error']}", file=sys.stderr)
    return 1 if ex.failed else 0


def _check_dependencies(args: argparse.Namespace, runs, command: str) -> None:
    """Before any run starts: what a host's own training function needs in the harness's
    worker processes (`Host.requires`; an error naming the extra); without matplotlib,
    ``--no-plots`` is implied, with one line saying so."""
    from dataflex_rl.deps import plots_available, require

    if runs:  # (report has none: it imports no host)
        from dataflex_rl.harness.running.runner import run_host

        own = {(r.host_class, r.train_fn): r for r in runs if r.python is None}
        for run in own.values():  # in the worker processes, with the host's own function
            host = run_host(run)
            if run.train_fn == host.train_default:
                for module in host.requires:
                    require(module, f"{command} (host {host.name}'s runs)")
    if not args.no_plots and not plots_available(f"{command}: PNG plots"):
        args.no_plots = True


def _cmd_report(args: argparse.Namespace) -> int:
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.harness.reporting.report import (
        ReportInputs,
        prepare_report,
        write_report_files,
    )
    from dataflex_rl.harness.reporting.strata import references, skip_reason, write_strata_report
    from dataflex_rl.harness.statistics.results import read_proportions_csv
    from dataflex_rl.tracking import TrackingConfig, require_backends

    _check_dependencies(args, [], "dataflex-rl report")
    tracking = TrackingConfig(
        backends=list(dict.fromkeys(args.track or [])), project=args.project or "dataflex-rl"
    )
    require_backends(tracking, "dataflex-rl report")
    table, label, setup, default_out = _report_table(args)
    requested = args.baseline or ()
    refs = references(table, requested)
    rows = table.rows
    if not table.by and skip_reason(table.strata[0], refs[0], requested):
        raise ConfigError(f"{table.path}: {skip_reason(table.strata[0], refs[0], requested)}")
    out = Path(args.out or default_out)
    props = read_proportions_csv(args.proportions) if args.proportions else []
    options = _stats_options(args)
    notes = [*table.notes, *_percent_hint(rows, args.scale)]
    inputs = ReportInputs(
        title=args.title or f"Comparison: {label}",
        baseline=refs[0] or "",
        options=options,
        setup=[*setup, *notes],
        proportions=props,
        plots=not args.no_plots,
        tracking=tracking,
        params={"results": label, "rows": len(rows)},
    )
    for n in notes:
        print(f"note: {n}")
    if not table.by:
        _print_summary(write_report_files(prepare_report(rows, out, inputs)), out)
        return 0
    strata = write_strata_report(table, out, inputs, requested)
    for s, parts, ref in zip(table.strata, strata, refs):
        print(f"== {s.label} ==")
        if parts is None:
            print(f"not compared: {skip_reason(s, ref, requested)}", end="\n\n")
        else:
            _print_summary(parts, parts.out, end="\n\n")
    print(f"index of {len(table.strata)} strata: {out / 'report.md'}")
    return 0


def _stats_options(args: argparse.Namespace):
    from dataflex_rl.harness.statistics.analysis import StatsOptions

    keys = ("alpha", "power", "n_boot", "seed", "margin")
    return StatsOptions(**{k: getattr(args, k) for k in keys})


GATE_HELP = """\
A check for CI: the statistics of 'report' on the same inputs (--from-csv or --from-tracker,
--by, --scale, --domains, --baseline), then an exit status: 0 pass, 1 fail, 3 inconclusive
(2 is a one-line error, as for every command). --require better passes a method called better
than the baseline and fails one called worse; --require non-inferior --margin M passes one not
worse by more than M (score units: 0.01 is 1 point of accuracy; one-sided sign-flip test, Holm
over the methods) and fails one worse by more than M. Otherwise the gate is inconclusive and
says how many paired seeds would decide it. Every compared method is gated (--method: only
these) on the average (--summary: another summary); with --by, every stratum. One line per
check, then a summary line; --json FILE (or - for stdout) writes the verdict for bots.
Example: dataflex-rl gate --from-csv results.csv --baseline main --require non-inferior
  --margin 0.01 --json gate.json"""


def _cmd_gate(args: argparse.Namespace) -> int:
    import json

    from dataflex_rl.core.io import atomic_write_text
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.harness.reporting.gate import gate
    from dataflex_rl.harness.reporting.strata import references, skip_reason
    from dataflex_rl.harness.statistics.analysis import analyze

    table, _, _, _ = _report_table(args)
    requested = args.baseline or ()
    refs = references(table, requested)
    if not table.by and skip_reason(table.strata[0], refs[0], requested):
        raise ConfigError(f"{table.path}: {skip_reason(table.strata[0], refs[0], requested)}")
    options = _stats_options(args)
    log = sys.stderr if args.json == "-" else sys.stdout
    analyses = []
    for s, ref in zip(table.strata, refs):
        why = skip_reason(s, ref, requested)
        if why:
            print(f"note: {s.label}: not gated, {why}", file=log)
        else:
            analyses.append((s.label if table.by else "", analyze(s.rows, ref, options)))
    result = gate(analyses, args.require, args.method or (), args.summary)
    print("\n".join(result.lines()), file=log)
    if args.json == "-":
        print(json.dumps(result.as_json(), indent=2))
    elif args.json:
        atomic_write_text(Path(args.json), json.dumps(result.as_json(), indent=2) + "\n")
    return result.exit_code


def _report_table(args: argparse.Namespace):
    """``(ResultsTable, what it is, setup lines, default output folder)`` of ``report``'s
    input: a results CSV (long or wide, --by strata) or a tracker store; --scale and
    --domains apply to both."""
    from dataflex_rl.core.registry import ConfigError
    from dataflex_rl.harness.statistics.results_table import read_domains, read_table, table_of_rows

    domains = read_domains(args.domains) if args.domains else None
    scaled = f"; scores × {args.scale:g}" if args.scale != 1.0 else ""
    tracker_only = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in TRACKER_FLAGS}
    if args.from_csv is not None:
        given = [flag for flag, value in tracker_only.items() if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: only with --from-tracker, not --from-csv")
        csv_path = Path(args.from_csv)
        table = read_table(
            csv_path, wide=args.wide or None, by=args.by or (), scale=args.scale, domains=domains
        )
        setup = [
            f"results: `{csv_path}` ({table.layout} layout, {len(table.rows)} scores; "
            f"benchmarks {', '.join(table.benchmarks)}){scaled}"
        ]
        return table, csv_path.name, setup, csv_path.parent / f"{csv_path.stem}_report"
    if args.wide:
        raise ConfigError("--wide: only with --from-csv, not --from-tracker")
    from dataflex_rl.harness.statistics import tracked

    query = tracked.TrackerQuery(
        args.from_tracker,
        experiment=args.experiment,
        group=args.group,
        tags=tuple(args.tag or ()),
        method_field=args.method_field or tracked.METHOD_FIELD,
        seed_field=args.seed_field or tracked.SEED_FIELD,
        metrics=args.metrics or tracked.METRICS,
        exclude=tracked.EXCLUDE if args.exclude is None else tuple(args.exclude),
        step=args.step,
        by=args.by or (),
    )
    found = tracked.read_tracker(query)
    backend = args.from_tracker.partition(":")[0]
    table = table_of_rows(
        found.rows,
        args.from_tracker,
        by=query.by,
        keys=found.keys,
        scale=args.scale,
        domains=domains,
    )
    setup = [*found.setup, *([f"scores × {args.scale:g}"] if args.scale != 1.0 else [])]
    return table, args.from_tracker, setup, Path(f"{backend}_report")


def _percent_hint(rows, scale: float) -> list[str]:
    """A note when scores look like percent and are reported as they are."""
    scores = [r.score for r in rows]
    if scale == 1.0 and scores and max(scores) > 1 and min(scores) >= 0 and max(scores) <= 100:
        return ["scores look like percent (0-100): --scale 0.01 reports them in points"]
    return []


#: options of ``report`` that only ``--from-tracker`` reads
TRACKER_FLAGS = tuple(
    "--experiment --group --tag --method-field --seed-field --metrics --exclude --step".split()
)


REPLAY_HELP = """\
Re-run strategies on the rollouts a run logged (its decision log: decision_log.enabled: true in
the engine config, +dataflex.decision_log.enabled=true on verl, dataflex={"decision_log":
{"enabled": True}, ...} in TRL), step by step, each carrying its
own state. Reports per step and overall: retention, weight ESS, domain proportions asked for,
pre-rollout skip rate and the tokens it would not have generated, agreement with the logged
decision (Jaccard, weight correlation, exact steps) and between the replayed strategies.
Counterfactual on fixed rollouts: it says what a strategy would select and ask for, not whether
it would train better (docs/replay.md).
Example: dataflex-rl replay runs/baseline-s0 --strategy difffilter --strategy softmax
KEY=VALUE overrides after LOG_DIR are set in every replayed strategy (checked like a strategy
file): dataflex-rl replay runs/baseline-s0 --strategy difffilter select.actuator.low=0.3"""


def _cmd_replay(args: argparse.Namespace) -> int:
    from dataflex_rl.harness.replay.replay import read_log, replay, strategies_with_overrides
    from dataflex_rl.harness.replay.report import replay_document, write_replay_report

    log = read_log(args.log_dir)
    specs = strategies_with_overrides(args.strategy or [log.strategy], args.overrides or ())
    res = replay(log, specs)
    out = Path(args.out or log.folder.parent / "replay")
    files = write_replay_report(res, out, plots=not args.no_plots)
    from dataflex_rl.harness.reporting.document import text

    print(
        f"{log.num_steps} logged steps x {len(specs)} strategies in {res.seconds:.2f} s "
        f"({res.steps_per_second:.0f} steps/s)"
    )
    doc = replay_document(res, {}, out)
    print(text(doc, only=("overall", "approximate"), lead=False), end="")
    print(f"\nreport: {files['report']}")
    return 0


def _print_summary(parts, out: Path, end: str = "\n") -> None:
    """The report's lead and its scores section (`document.text` of `report_document`), and
    where the report is; ``parts`` None: no statistics (the baseline has no finished run)."""
    from dataflex_rl.harness.reporting.document import text
    from dataflex_rl.harness.reporting.report import report_document

    if parts is None:
        print(f"no statistics (the baseline has no finished run); see {out / 'report.md'}")
        return
    shown = text(report_document(parts), only=("scores",))
    print(f"{shown}\nreport: {out / 'report.md'} (one page: {out / 'report.html'})", end=end)


def _tracker_options(p: argparse.ArgumentParser) -> None:
    """The options of ``report --from-tracker``: which runs, and how they become rows."""
    from dataflex_rl.core.config import number_type, with_range
    from dataflex_rl.harness.statistics import tracked

    g = p.add_argument_group(
        "reading a tracker store (--from-tracker)",
        "The defaults read what a 'tracking:' section writes: method = the 'strategy' tag, "
        "seed = 'seed', benchmarks = the engine's held-out accuracies of the compared metric.",
    )
    g.add_argument("--experiment", help="only runs of this MLflow experiment / W&B project")
    g.add_argument("--group", help="only runs of this W&B group / MLflow 'group' tag")
    g.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only runs with this tag (a W&B tag, an MLflow tag name) or KEY=VALUE (a "
        "parameter, config value or tag of that value); repeat: all must hold",
    )
    for flag, default, what, example in (
        ("--method-field", tracked.METHOD_FIELD, "method", "name~^(.+)-seed"),
        ("--seed-field", tracked.SEED_FIELD, "seed", "name~seed(\\d+)$"),
    ):
        g.add_argument(
            flag,
            metavar="FIELD[~REGEX]",
            help=f"the run field holding the {what}: a parameter, config key or tag, or the "
            f"run's name, id, group or experiment; ~REGEX takes the regex's first group in "
            f"it (e.g. '{example}'); default {default}",
        )
    g.add_argument(
        "--metrics",
        metavar="GLOB|re:REGEX",
        help="metric keys that are benchmarks; a glob's benchmark is the part between its "
        "first and last wildcard (default: eval/*/<metric>, one benchmark per domain, <metric> "
        "being the runs' metric tag, else sampled where logged, else greedy), a regex's "
        "its 'benchmark' group or first group (e.g. 're:val/(.+)/acc')",
    )
    g.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help=f"metric keys left out (repeatable; default {' '.join(tracked.EXCLUDE)}, the "
        "mean over domains)",
    )
    step = number_type(int, ge=0)
    g.add_argument(
        "--step",
        type=step,
        metavar="N",
        help=with_range(
            "read the metrics at step N (every run must have it); default every step, the "
            "last one being the final score",
            step,
        ),
    )


def _input_options(p: argparse.ArgumentParser) -> None:
    """The options of ``report`` and ``gate`` that say what is compared and how: the results
    (a CSV or a tracker store), strata, scale, domains, baseline and the statistics."""
    from dataflex_rl.core.config import field_type, number_type, with_range
    from dataflex_rl.harness.statistics.analysis import StatsOptions

    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-csv",
        metavar="FILE",
        help="long CSV (method, seed, benchmark, score[, domain, step]) or wide CSV (one row "
        "per run: method, seed, descriptive columns, one numeric column per benchmark)",
    )
    source.add_argument(
        "--from-tracker",
        metavar="BACKEND:LOCATION",
        help="a tracker store: mlflow:TRACKING_URI, tensorboard:DIR or wandb:DIR "
        "(see 'reading a tracker store' below)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="FILE is wide (detected when it has no benchmark and score columns)",
    )
    p.add_argument(
        "--by",
        type=_columns,
        metavar="COL[,COL]",
        help="one comparison per value of these columns of FILE (e.g. model,campaign,regime), "
        "or of these fields of the tracker's runs (a parameter, config key or tag, or the run's "
        "name, id, group or experiment): a folder each, an index in report.md, every stratum "
        "in statistics.csv; an empty cell, or a run without the field, is a stratum of its own "
        "labelled (empty)",
    )
    factor = number_type(float, gt=0.0)
    p.add_argument(
        "--scale",
        type=factor,
        default=1.0,
        metavar="FACTOR",
        help=with_range(
            "multiply every score (0.01: percent scores become accuracies, shown in points)",
            factor,
        ),
    )
    p.add_argument(
        "--domains",
        metavar="FILE",
        help="benchmark -> domain (YAML 'math: [math500, aime24]' or 'math500: math', or a CSV "
        "benchmark,domain); groups and selects the benchmarks",
    )
    p.add_argument(
        "--baseline",
        type=_columns,
        metavar="METHOD[,METHOD...]",
        help="reference method; a list: in each stratum the first of them present (e.g. "
        "baseline,static); a stratum with none is listed, not compared (default 'baseline' "
        "if present, else the first method)",
    )
    # the ranges are the experiment file's 'statistics' declarations
    for flag, key, default, text in (
        ("--alpha", "alpha", 0.05, "family-wise error rate (Holm)"),
        ("--power", "power", 0.8, "power of the MDE"),
        ("--n-boot", "n_boot", 10_000, "bootstrap resamples"),
        ("--seed", "seed", 0, "seed of the bootstrap"),
        (
            "--margin",
            "margin",
            0.0,
            "non-inferiority and equivalence margin in score units (0.01: 1 point of "
            "accuracy): adds the verdicts 'not worse by more than M' and 'equivalent within "
            "±M' (one-sided sign-flip tests, Holm); default 0, none",
        ),
    ):
        kind = field_type(StatsOptions, key)
        p.add_argument(flag, type=kind, default=default, help=with_range(text, kind))


def _columns(text: str) -> tuple[str, ...]:
    """``--by model,campaign`` -> ("model", "campaign")."""
    cols = tuple(c.strip() for c in text.split(","))
    if not all(cols) or len(set(cols)) != len(cols):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected distinct column names separated by commas"
        )
    return cols


def register_commands(subparsers) -> None:
    """Add ``compare``, ``report``, ``gate`` and ``replay`` to the ``dataflex-rl`` sub-command parsers."""
    from dataflex_rl.core.config import number_type, with_range

    def keys() -> str:
        from dataflex_rl.core.config import help_text
        from dataflex_rl.harness.running.experiment import experiment_file

        return help_text(experiment_file(), "experiment keys (in the YAML, or KEY=VALUE after it):")

    fmt = argparse.RawDescriptionHelpFormatter
    count = number_type(int, ge=1)
    margin = number_type(float, gt=0.0)
    p = subparsers.add_parser(
        "compare",
        help="run strategies × seeds (paired) and report paired statistics",
        description=COMPARE_HELP,
        formatter_class=fmt,
        epilog=keys,
    )
    p.add_argument("experiment", help="experiment YAML (e.g. configs/experiments/quick.yaml)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="experiment overrides, e.g. budget.steps=50 engine.optim.lr=0.01 "
        "seeds=4 (values are YAML; checked like the file)",
    )
    p.add_argument(
        "--workers",
        type=count,
        metavar="N",
        help=with_range(
            "worker processes (default: one per resources.cpus_per_run cores); with "
            "--executor ray: at most N runs submitted at once (default: all, queued by Ray)",
            count,
        ),
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="where the runs execute (default: the experiment's 'executor', else local): "
        "local worker processes, or Ray tasks on a cluster (pip install "
        '"dataflex-rl[ray]"; docs/cluster.md)',
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="with --executor ray: the cluster to submit to (auto, HOST:PORT or "
        "ray://HOST:PORT; default: $RAY_ADDRESS, else a local cluster for this command)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default runs/compare/<experiment name>)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument(
        "--seeds",
        type=count,
        metavar="N",
        help=with_range(
            "run seeds 0..N-1 instead of the experiment's 'seeds' "
            "(finished runs of the first seeds are reused)",
            count,
        ),
    )
    p.add_argument(
        "--control",
        action="append",
        metavar="NAME",
        help="add a control arm (repeatable): aa (must be no different), no_update, "
        "half_lr, drop_half (must be worse); see docs/controls.md",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="add seeds in rounds until every comparison is decided (anytime-valid "
        "rule at the experiment's alpha); needs --max-seeds",
    )
    p.add_argument(
        "--max-seeds",
        type=count,
        metavar="N",
        help=with_range("with --until-decided: stop at N seeds", count),
    )
    p.add_argument(
        "--round",
        type=count,
        metavar="K",
        help=with_range("with --until-decided: seeds added per round (default 2)", count),
    )
    p.add_argument(
        "--margin",
        type=margin,
        metavar="M",
        help=with_range(
            "with --until-decided: equivalence margin in score units "
            "(default 0.02, i.e. 2 points of accuracy)",
            margin,
        ),
    )
    p.set_defaults(func=_cmd_compare)

    p = subparsers.add_parser(
        "report",
        help="paired statistics, report.md and report.html from a CSV of external results",
        description=REPORT_HELP,
        formatter_class=fmt,
    )
    _input_options(p)
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default <FILE stem>_report next to FILE; with --from-tracker "
        "<BACKEND>_report here)",
    )
    p.add_argument(
        "--proportions",
        metavar="FILE",
        help="optional proportions.csv (method, seed, step, domain, target, actual)",
    )
    p.add_argument("--title", help="report title")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    p.add_argument(
        "--track",
        action="append",
        choices=("tensorboard", "wandb", "mlflow"),
        metavar="BACKEND",
        help="also log the report to this tracker (tensorboard, wandb or mlflow; repeat for "
        "several), its files under --out (docs/tracking.md)",
    )
    p.add_argument("--project", help="W&B project / MLflow experiment of --track")
    _tracker_options(p)
    p.set_defaults(func=_cmd_report)

    p = subparsers.add_parser(
        "gate",
        help="a CI check: exit 0 pass, 1 fail, 3 inconclusive (better, or non-inferior "
        "within a margin) on report's inputs",
        description=GATE_HELP,
        formatter_class=fmt,
    )
    _input_options(p)
    p.add_argument(
        "--require",
        choices=("better", "non-inferior"),
        default="better",
        help="what each gated method must show against the baseline (default better; "
        "non-inferior needs --margin)",
    )
    p.add_argument(
        "--method",
        type=_columns,
        metavar="METHOD[,METHOD...]",
        help="gate only these methods (default every compared method)",
    )
    p.add_argument(
        "--summary",
        metavar="NAME",
        help="gate on this summary, a benchmark or domain (default the average)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write the verdict as JSON to FILE ('-': stdout, the lines then go to stderr)",
    )
    _tracker_options(p)
    p.set_defaults(func=_cmd_gate)

    p = subparsers.add_parser(
        "replay",
        help="re-run strategies on a run's decision log "
        "(what they would keep, weight, ask for, skip)",
        description=REPLAY_HELP,
        formatter_class=fmt,
    )
    p.add_argument(
        "log_dir",
        metavar="LOG_DIR",
        help="a decision log folder, or a run folder holding decisions/",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="strategy overrides set in every replayed strategy, e.g. select.actuator.low=0.3 "
        "(values are YAML; checked like a strategy file)",
    )
    p.add_argument(
        "--strategy",
        action="append",
        metavar="SPEC",
        help="preset name or strategy YAML (repeatable; default: the run's own)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: replay/ next to the log folder)",
    )
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    p.set_defaults(func=_cmd_replay)
