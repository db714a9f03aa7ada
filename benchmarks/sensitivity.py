"""How sensitive is the embedded instrument? The baseline next to every control, paired seeds.

Runs an experiment's baseline and the four built-in control arms (``aa``, ``no_update``,
``half_lr``, ``drop_half``; docs/controls.md) over N paired seeds with the harness's own runner
(parallel processes; finished runs under --out are reused, interrupted ones resume), then
reports against the targets of issue 11 (computations in
`sensitivity_study`, beside it):

- the baseline's gain over the warm start (final − step-0 held-out score) per domain and
  averaged over domains, with its SD and minimum over seeds and SD/gain, for the experiment's
  metric and the other one when the runs have it (targets: ≥ +8 points on the average, ≥ +3 on
  every domain, SD ≤ gain/3);
- CPU-seconds per run (≤ 120) and steps (≤ 200);
- the pairing correlation of each arm's final score with the baseline's (≥ 0.6 is the target
  for a mild strategy);
- per control: paired difference (mean, SD), the harness's verdict at N seeds, and the seeds
  the verdict rule needs to call that harm "worse" at power 0.8 (simulated);
- CPU-minutes per decided verdict (harms called "worse").

    .venv/bin/python benchmarks/sensitivity.py [--experiment configs/experiments/quick.yaml]
        [--seeds 6] [--workers 2] [--out runs/sensitivity/<name>] [--steps N]

Writes sensitivity.json and sensitivity.md under --out, beside the harness's own report.md.
How long: 5 arms × N seeds runs, each costing what one run of the experiment costs (the
report prints the measured CPU-seconds). docs/harness.md measured about 20 CPU-seconds per
40-step run of quick.yaml's former settings, so 6 seeds are about 30 × 20 s = 10 CPU-minutes,
some 5–6 minutes on 2 workers; at issue 11's ceiling of 120 CPU-seconds per run, 60
CPU-minutes (30 minutes on 2 workers).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import sensitivity_study as sens  # benchmarks/ is the script's folder

from dataflex_rl.core.spec import load_yaml
from dataflex_rl.harness.running.compare import run_compare


def _pts(v: float, signed: bool = True) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{100 * v:+.1f}" if signed else f"{100 * v:.1f}"


def _state(passed: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "n/a"}[passed]


def _check_row(c: sens.Check) -> str:
    op = "≥" if c.at_least else "≤"
    if c.unit == "points":
        value, bound = _pts(c.value, c.at_least), _pts(c.bound, c.at_least)
    else:
        value, bound = f"{c.value:.1f}", f"{c.bound:g}"
    return f"| {c.name} | {value} | {op} {bound} | {_state(c.passed)} |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _need(n: int | None, note: str) -> str:
    return str(n) if n is not None else ("—" if note in ("A/A", "") else note)


def _metric_section(metric: str, part: dict, baseline: str, m: int, primary: bool) -> list[str]:
    gains, controls = part["gains"], part["controls"]
    md = [
        f"## {metric} held-out accuracy" + (" (the experiment's metric)" if primary else ""),
        "",
        f"Gain of `{baseline}` over the warm start (final − step 0), points, "
        f"{len(part['seeds'])} seeds:",
        "",
    ]
    md += _table(
        ["summary", "seeds", "gain", "SD", "min", "SD/gain"],
        [
            [
                g.summary,
                str(g.n),
                _pts(g.mean),
                _pts(g.sd, False),
                _pts(g.min),
                f"{g.sd_over_gain:.2f}" if math.isfinite(g.sd_over_gain) else "—",
            ]
            for g in gains
        ],
    )
    md += [
        "",
        "| target (issue 11) | observed | required | |",
        "|---|---|---|---|",
        *map(_check_row, part["gain_checks"]),
        "",
    ]
    fam = m > 1
    md += [
        "Controls against the baseline (paired differences arm − baseline on the average, "
        "points; verdict of the harness's analysis, each control tested alone; r: "
        f"pairing correlation of final scores; target r ≥ {sens.TARGET_CORR:g} for a mild "
        "strategy — the mildest arms here are the A/A copy, drop_half and half_lr):",
        "",
    ]
    md += _table(
        [
            "control",
            "must be",
            "seeds",
            "Δ mean",
            "SD of Δ",
            "r",
            "verdict",
            "as it must",
            "seeds for power 0.8 (alone)",
        ]
        + ([f"(among {m})"] if fam else []),
        [
            [
                c.label,
                c.outcome,
                str(c.n),
                _pts(c.delta),
                _pts(c.sd, False),
                f"{c.corr:+.2f}" if math.isfinite(c.corr) else "—",
                c.verdict,
                c.status,
                _need(c.seeds_needed, c.note),
            ]
            + ([_need(c.seeds_needed_family, c.note)] if fam else [])
            for c in controls
        ],
    )
    return md + [""]


def render(report: dict) -> str:
    """The markdown report (also printed)."""
    b = report["budget"]
    md = [
        f"# Sensitivity of the embedded instrument: {report['experiment']}",
        "",
        f"- baseline `{report['baseline']}` and the controls, seeds {report['seeds']}; "
        f"{b['steps']} steps × {b['prompts_per_step']} prompts × {b['samples_per_prompt']} "
        f"samples; domains {', '.join(report['domains'])}",
        f"- runs: {report['runs']} ({report['failed']} failed); {report['pairing_check']}",
        f"- the experiment makes {report['m']} comparison(s) (m for the seeds needed among them)",
        "",
    ]
    for metric, part in report["metrics"].items():
        md += _metric_section(
            metric, part, report["baseline"], report["m"], metric == report["primary_metric"]
        )
    cpu = report["cpu_seconds_per_run"]
    md += [
        "## Cost",
        "",
        f"CPU time of all runs: {report['cpu_seconds_total'] / 60:.1f} CPU-minutes over "
        f"{len(cpu)} runs (max {max(cpu, default=math.nan):.1f} s per run)"
        + (
            f"; {report['runs_without_cpu_seconds']} run(s) have no cpu_seconds"
            if report["runs_without_cpu_seconds"]
            else ""
        )
        + ".",
        "",
        "| target (issue 11) | observed | required | |",
        "|---|---|---|---|",
        *map(_check_row, report["cost_checks"]),
        "",
        f"CPU-minutes per decided verdict: {report['cpu_minutes_per_verdict']:.1f} "
        f"({report['decided']} of {report['harms']} harm controls called worse on "
        f"{report['primary_metric']}; the A/A arm's non-verdict is not counted).",
        "",
    ]
    return "\n".join(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="configs/experiments/quick.yaml")
    ap.add_argument("--seeds", type=int, default=6, help="paired seeds 0..N-1")
    ap.add_argument("--steps", type=int, default=None, help="budget.steps (default: the file's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="default runs/sensitivity/<experiment name>")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    path = Path(args.experiment)
    exp, m = sens.sensitivity_experiment(
        load_yaml(path), str(path), path.resolve().parent, seeds=args.seeds, steps=args.steps
    )
    out = Path(args.out or Path("runs") / "sensitivity" / exp.name)
    result = run_compare(exp, out, workers=args.workers, progress=not args.no_progress, plots=False)
    report = sens.measure(exp, result.execution, m)
    text = render(report)
    (out / "sensitivity.md").write_text(text)
    (out / "sensitivity.json").write_text(json.dumps(sens.to_json(report), indent=1))
    print(text)
    print(f"written: {out / 'sensitivity.md'}, {out / 'sensitivity.json'}, {out / 'report.md'}")


if __name__ == "__main__":
    main()
