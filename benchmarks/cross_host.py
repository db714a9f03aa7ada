"""The same instrument through TRL: does `compare` on TRL's GRPOTrainer see what it sees on
the embedded engine?

On the engine's shipped warm-started tiny policy and default tasks (exported for TRL on first
use: `examples/experiments/trl_quick.yaml`'s settings), over ``--seeds`` paired seeds, each host
runs the baseline (plain GRPO) with the ``aa`` and ``drop_half`` controls through
``dataflex-rl compare`` (`run_compare`), both on the same budget: ``--steps`` steps of 16
prompts x 8 samples, sampled held-out accuracy (4 samples per problem at temperature 1, 200
problems per domain) at step 0, every ``--every`` steps and at the end. TRL's settings: plain
SGD at 0.02 on the gradient clipped to norm 1 (10 warm-up steps), loss_type dapo, up to 10 new
tokens, float32 on CPU — the engine's optimizer, TRL's loss.

Targets (issue 21): the TRL-hosted baseline raises sampled held-out accuracy over the warm start
by >= +8 points averaged over domains; ``drop_half`` called worse; ``aa`` not different. The
engine's figures for the same seeds are printed beside them. The last lines:

    trl    baseline +X.X points over the warm start (target >= +8): MET/NOT MET; drop_half: V; aa: V
    engine baseline +X.X points ...

    flock /tmp/dataflex-bench.lock .venv/bin/python benchmarks/cross_host.py \\
        [--seeds 6] [--steps 200] [--every 50] [--per-domain 200] [--hosts trl engine] \\
        [--workers 2] [--out runs/bench/cross_host]

Runs are resumable (a rerun continues unfinished runs and reuses finished ones), so the hosts
can be run one at a time (``--hosts trl``, then ``--hosts engine``) and the table printed from
both (``--report-only``: from the runs finished so far, nothing run). A benchmark, not a test:
at the defaults the TRL host took ~32 min on 2 cores with one thread per run (2026-12-02:
baseline +10.0 points, drop_half worse, aa no detectable difference; docs/hosts/compare.md).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRL = {
    "python": str(ROOT / ".venv-trl" / "bin" / "python"),
    "exports": str(ROOT / "exported"),
    "lr": 0.02,
    "grpo": {
        "use_cpu": True,
        "bf16": False,
        "optim": "sgd",
        "max_grad_norm": 1.0,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": 10,
        "max_completion_length": 10,
        "temperature": 1.0,
        "loss_type": "dapo",
    },
}
ENGINE = {
    "policy": "tiny",
    "optim": {"name": "sgd", "lr": 0.02, "grad_clip": 1.0},
    "grpo": {"max_new_tokens": 10, "loss_agg": "informative-token-mean"},
}


def experiment(host: str, args) -> dict:
    return {
        "name": f"cross_host_{host}",
        "description": f"plain GRPO with the aa and drop_half controls on host {host}",
        "host": host,
        host: TRL if host == "trl" else ENGINE,
        "strategies": ["baseline"],
        "controls": ["aa", "drop_half"],
        "seeds": args.seeds,
        "budget": {"steps": args.steps, "prompts_per_step": 16, "samples_per_prompt": 8},
        "evaluation": {
            "metric": "sampled",
            "every": args.every,
            "per_domain": args.per_domain,
            "samples": 4,
        },
    }


def gains(result, domains: list[str]) -> dict[str, dict]:
    """arm -> {"gain": `sensitivity.Gain` of the domain average (fractions, over seeds: mean,
    SD, min), "curve": {step: mean over seeds of the domain-average accuracy}, "seeds"}."""
    from sensitivity_study import gain_table  # benchmarks/ is the script's folder

    from dataflex_rl.harness.running.compare import result_rows

    rows = result_rows(result.execution, domains, "sampled")
    out = {}
    for arm in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == arm]
        cells: dict[int, list[float]] = {}
        for r in mine:
            cells.setdefault(r.step, []).append(r.score)
        full = len(domains) * len({r.seed for r in mine})
        curve = {st: 100 * sum(v) / len(v) for st, v in sorted(cells.items()) if len(v) == full}
        average = gain_table(mine, arm)[-1]
        out[arm] = {"gain": average, "curve": curve, "seeds": len({r.seed for r in mine})}
    return out


def verdicts(result) -> dict[str, tuple[float, str]]:
    """control label -> (delta vs the baseline in points, verdict) on the domain average."""
    if result.analysis is None:
        return {}
    return {
        c.method: (100 * c.delta if not math.isnan(c.delta) else math.nan, c.verdict)
        for c in result.analysis.primary.controls
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--per-domain", type=int, default=200, help="held-out problems per domain")
    p.add_argument("--hosts", nargs="+", default=["trl", "engine"], choices=["trl", "engine"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="runs/bench/cross_host")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: the table from the runs already finished in --out",
    )
    args = p.parse_args()
    if args.report_only:
        args.hosts = []

    from dataflex_rl.harness.running.compare import run_compare
    from dataflex_rl.harness.running.experiment import parse_experiment

    lines = []
    for host in ("trl", "engine"):
        exp = parse_experiment(experiment(host, args), f"cross_host[{host}]")
        out = Path(args.out) / host
        if host not in args.hosts and not (out / "experiment.json").exists():
            continue
        t0 = time.perf_counter()
        # a host not asked for is only read back (its finished runs), never run
        cells = None if host in args.hosts else _finished_cells(exp, out)
        if cells is not None and not cells:
            continue
        res = run_compare(exp, out, workers=args.workers, plots=False, cells=cells)
        wall = time.perf_counter() - t0
        g, v = gains(res, exp.domains), verdicts(res)
        print(f"\n{host}: {len(res.execution.done)} runs in {res.out_dir} ({wall / 60:.1f} min)")
        print(f"  {'arm':<20}{'seeds':>6}{'gain':>8}{'SD':>6}{'min':>7}  curve (step: points)")
        for arm, x in g.items():
            gain = x["gain"]
            curve = ", ".join(f"{st}: {val:.1f}" for st, val in x["curve"].items())
            print(
                f"  {arm:<20}{x['seeds']:>6}{100 * gain.mean:>+8.1f}{100 * gain.sd:>6.1f}"
                f"{100 * gain.min:>+7.1f}  {curve}"
            )
        for arm, (delta, verdict) in v.items():
            print(f"  {arm}: {delta:+.1f} points vs baseline, verdict {verdict}")
        if "baseline" in g:
            gain = 100 * g["baseline"]["gain"].mean
            dh = v.get("drop_half_control", (math.nan, "n/a"))[1]
            aa = v.get("aa_control", (math.nan, "n/a"))[1]
            lines.append(
                f"{host:<6} baseline {gain:+.1f} points over the warm start (target >= +8): "
                f"{'MET' if gain >= 8 else 'NOT MET'}; drop_half: {dh} (target worse); "
                f"aa: {aa} (target not better/worse); {g['baseline']['seeds']} seeds, "
                f"{args.steps} steps"
            )
    print()
    for line in lines:
        print(line)
    return 0


def _finished_cells(exp, out: Path) -> set[tuple[str, int]]:
    """The runs of ``exp`` already finished in ``out`` (to report a host without running it)."""
    from dataflex_rl.harness.running.runner import load_done, plan

    return {(r.method, r.seed) for r in plan(exp, out) if load_done(r) is not None}


if __name__ == "__main__":
    raise SystemExit(main())
