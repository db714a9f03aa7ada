"""What the Ray executor costs per run against the local one, measured in the same invocation.

The same small engine matrix (the shipped ``tiny`` policy; strategies × seeds × a short budget)
runs through ``compare --executor local`` (worker processes) and ``--executor ray`` (a task per
run on a local Ray cluster with as many CPUs as local workers), alternately, ``--reps`` times
each, every time into a fresh output folder. Reported per executor: the wall time of the
matrix (the median over reps) and per run, the ratio ray/local, and the overhead per run in
slot-seconds, (wall_ray − wall_local) × slots / runs: what each run costs the cluster beyond
what a local worker spends on it (a fresh process per run that imports torch and the engine,
the task's scheduling, the record back). Starting the local cluster is timed apart (once per
``compare``, not per run). The two executors' results.csv must be byte-identical (checked).

    .venv/bin/python benchmarks/ray_overhead.py [--strategies 3] [--seeds 2] [--steps 10]
        [--workers 2] [--reps 1] [--out runs/bench_ray]

The defaults (6 runs of about 6 s, 2 workers) take about 50 s per rep (both executors) on two
cores; figures in docs/cluster.md ("Overhead").
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import time
from pathlib import Path

from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.running.experiment import parse_experiment

STRATEGIES = ["baseline", "difffilter", "softmax", "maxvar", "per", "gfpo"]


def experiment(strategies: int, seeds: int, steps: int):
    return parse_experiment(
        {
            "name": "ray_overhead",
            "strategies": STRATEGIES[:strategies],
            "seeds": seeds,
            "engine": {"policy": "tiny", "threads": 1},
            "budget": {"steps": steps, "prompts_per_step": 8, "samples_per_prompt": 4},
            "evaluation": {"metric": "greedy", "every": 0, "per_domain": 50},
            "statistics": {"n_boot": 200},
        },
        "ray_overhead",
    )


def timed(exp, out: Path, workers: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    res = run_compare(exp, out, workers=workers, progress=False, plots=False)
    wall = time.perf_counter() - t0
    if res.execution.failed:
        raise SystemExit(f"{exp.executor}: {res.execution.failed[0]['error']}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", type=int, default=3, help="strategies (of 6)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="GRPO steps per run")
    p.add_argument("--workers", type=int, default=2, help="local workers = Ray CPUs")
    p.add_argument("--reps", type=int, default=1, help="matrices per executor (alternating)")
    p.add_argument("--out", default="runs/bench_ray")
    args = p.parse_args()

    import ray

    exp = experiment(args.strategies, args.seeds, args.steps)
    runs = len(exp.labels) * len(exp.seeds)
    out = Path(args.out)
    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    start = time.perf_counter() - t0
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    try:
        for rep in range(args.reps):
            for name in ("local", "ray"):
                walls[name].append(
                    timed(dataclasses.replace(exp, executor=name), out / name, args.workers)
                )
                print(f"rep {rep + 1}: {name} {walls[name][-1]:.1f} s", flush=True)
    finally:
        ray.shutdown()
    same = (out / "local" / "results.csv").read_bytes() == (
        out / "ray" / "results.csv"
    ).read_bytes()
    local, remote = (statistics.median(walls[n]) for n in ("local", "ray"))
    print(
        f"\n{runs} runs ({args.strategies} strategies x {args.seeds} seeds, {args.steps} steps), "
        f"{args.workers} local workers / Ray CPUs, median of {args.reps} rep(s)"
    )
    print(f"{'executor':<8} {'wall s':>8} {'s per run':>10} {'ratio':>6}")
    for name, wall in (("local", local), ("ray", remote)):
        print(f"{name:<8} {wall:>8.1f} {wall * args.workers / runs:>10.1f} {wall / local:>6.2f}")
    print(
        f"overhead per run: {(remote - local) * args.workers / runs:+.1f} slot-seconds; "
        f"starting the local cluster: {start:.1f} s (once per compare)"
    )
    print(f"results.csv byte-identical across executors: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
