"""How much a data strategy costs a training step, against a per-group Python loop.

Times ``Strategy(preset, domains=...).decide(batch)`` -- the whole decision a host pays for,
metrics included -- for every preset at three batch sizes, on CPU with 2 threads, next to a
straightforward per-group loop implementation of the same preset (`loop_baselines.py`) timed
in the same run. Before timing, each preset's vectorized and loop outputs are checked to agree.

Targets at the largest size (512 prompts x 16 samples, 4096 tokens):

* every response- or group-level preset: <= 10 ms and >= 25x faster than its loop;
* the token-level ``ar``: within 2x of the floor, one pass that only reads its inputs
  (``w = alpha * exp(old_log_probs) + (1 - alpha)``, masked, plus one sum for the mean).

Mixing presets run with ``warmup_steps: 0, every: 1``, so every timed call observes the batch
and updates the proportions. Each size's header also prints what merely reading the per-token
inputs once costs (advantages, old log-probs, mask): every decision reads them, since a row with
a non-finite value on a valid token takes part in nothing, so it bounds every preset from below.

2-thread timings need an otherwise idle machine (an OpenMP region waits for its slowest
thread): ``--wait-quiet`` waits for a low load average, and ``--clock cpu`` with
``--threads 1`` gives figures that other processes barely disturb.

Usage::

    .venv/bin/python benchmarks/strategy_overhead.py                 # all sizes, 7 repeats
    .venv/bin/python benchmarks/strategy_overhead.py --sizes small --presets difffilter,ar
    .venv/bin/python benchmarks/strategy_overhead.py --threads 1 --clock cpu    # busy machine
    .venv/bin/python benchmarks/strategy_overhead.py --out benchmarks/results/overhead
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loop_baselines, when run as a script

import loop_baselines as loops  # noqa: E402

from dataflex_rl import Strategy  # noqa: E402
from dataflex_rl.core.batch import RolloutBatch  # noqa: E402
from dataflex_rl.presets import PRESETS  # noqa: E402

#: name -> (prompts, samples per prompt G, response tokens T)
SIZES = {"small": (64, 8, 1024), "medium": (256, 8, 2048), "large": (512, 16, 4096)}
DOMAINS = ("math", "logic", "science")
MIX_PRESETS = loops.MIXERS
TOKEN_LEVEL = ("ar",)
REFERENCE = ("baseline",)          # no mechanism: shown, but no target applies
MAX_MS, MIN_RATIO, MAX_FLOOR_RATIO = 10.0, 25.0, 2.0
AR_ALPHA = 0.5


# ---------------------------------------------------------------------------- batches
def make_tensors(prompts: int, G: int, T: int, seed: int = 0, n_pad: int = 4) -> dict:
    """A realistic GRPO batch: 0/1 rewards from a per-group solve probability, group-normalized
    advantages, old log-probs <= 0, variable lengths (right-padded, some truncated at T),
    three domains, and ``n_pad`` padding rows (copies of the first rows, as hosts add them).
    """
    g = torch.Generator().manual_seed(seed)
    B = prompts * G
    group = torch.arange(prompts).repeat_interleave(G)
    u = torch.rand(prompts, generator=g)
    # a quarter of the prompts unsolved, a sixth always solved, the rest in between
    p_solve = torch.where(u < 0.25, 0.0, torch.where(u > 5 / 6, 1.0, torch.rand(prompts,
                                                                               generator=g)))
    rewards = (torch.rand(B, generator=g) < p_solve[group]).float()
    lengths = torch.randint(T // 16, T + 1, (B,), generator=g)
    lengths[torch.rand(B, generator=g) < 0.1] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mean = torch.zeros(prompts).index_add_(0, group, rewards) / G
    var = torch.zeros(prompts).index_add_(0, group, (rewards - mean[group]) ** 2) / (G - 1)
    adv_resp = (rewards - mean[group]) / (var.sqrt()[group] + 1e-6)
    advantages = adv_resp[:, None] * mask
    old_log_probs = torch.empty(B, T).exponential_(1.0 / 0.3, generator=g).neg_().mul_(mask)
    domain = torch.randint(0, len(DOMAINS), (prompts,), generator=g)[group]
    if n_pad:
        idx = torch.arange(n_pad)
        rewards = torch.cat([rewards, rewards[idx]])
        mask = torch.cat([mask, mask[idx]])
        advantages = torch.cat([advantages, advantages[idx]])
        old_log_probs = torch.cat([old_log_probs, old_log_probs[idx]])
        group = torch.cat([group, group[idx]])
        domain = torch.cat([domain, domain[idx]])
    is_padding = torch.zeros(B + n_pad, dtype=torch.bool)
    is_padding[B:] = True
    return {"rewards": rewards, "response_mask": mask, "advantages": advantages,
            "old_log_probs": old_log_probs, "group_ids": group, "domain_ids": domain,
            "is_padding": is_padding}


def make_batch(t: dict, step: int = 0) -> RolloutBatch:
    return RolloutBatch(domains=DOMAINS, step=step, **t)


def strategy_spec(name: str):
    if name in MIX_PRESETS:  # update the proportions on every call
        return {"name": name, "mix": {"preset": name, "warmup_steps": 0, "every": 1}}
    return name


def loop_for(name: str):
    return loops.LoopMixer(name, len(DOMAINS)) if name in MIX_PRESETS else loops.LOOPS[name]


# ---------------------------------------------------------------------------- agreement
def check_agreement(name: str, t: dict, decision, ref: dict) -> None:
    """Assert the vectorized decision equals the loop's (floats to 1e-5 relative)."""
    keep = decision.keep_mask
    ref_keep = torch.tensor(ref["keep"])
    if name == "topk" and not torch.equal(keep, ref_keep):
        # the ranking of scores equal up to float rounding may differ; nothing else may
        diff = keep != ref_keep
        scores = torch.tensor(ref["scores"], dtype=torch.float64)
        cut = scores[ref_keep].min()
        assert int(keep.sum()) == int(ref_keep.sum()), f"{name}: kept counts differ"
        assert torch.allclose(scores[diff], cut.expand(int(diff.sum())), rtol=1e-5), \
            f"{name}: keep masks differ beyond rounding ties"
    else:
        assert torch.equal(keep, ref_keep), f"{name}: keep masks differ"
    if "weights" in ref:
        torch.testing.assert_close(decision.weights_per_response.double(), ref["weights"],
                                   rtol=1e-5, atol=1e-6, msg=f"{name}: weights differ")
    if "token_weights" in ref:
        torch.testing.assert_close(decision.weights_per_token, ref["token_weights"],
                                   rtol=1e-5, atol=1e-6, msg=f"{name}: token weights differ")
    if "advantages" in ref:
        assert decision.advantages is not None, f"{name}: advantages not recomputed"
        expected = ref["advantages"][:, None].float() * t["response_mask"]
        torch.testing.assert_close(decision.advantages, expected, rtol=1e-5, atol=1e-5,
                                   msg=f"{name}: recomputed advantages differ")
    if "proportions" in ref:
        assert decision.proportions is not None, f"{name}: no proportions update"
        torch.testing.assert_close(decision.proportions, ref["proportions"], rtol=1e-6,
                                   atol=1e-9, msg=f"{name}: proportions differ")


def agree(name: str, t: dict) -> None:
    """Fresh strategy and loop; three steps for mixers (rewards shifted per step)."""
    strategy, loop = Strategy(strategy_spec(name), domains=DOMAINS), loop_for(name)
    for k in range(3 if name in MIX_PRESETS else 1):
        tk = dict(t, rewards=torch.roll(t["rewards"], 7 * k)) if k else t
        decision, ref = strategy.decide(make_batch(tk)), loop(tk)
    check_agreement(name, tk, decision, ref)


# ---------------------------------------------------------------------------- timing
#: the clock `timed` reads: wall time, or this process's CPU time (``--clock cpu``: robust to
#: other processes on the machine, but counts every thread's time)
CLOCK = time.perf_counter


def timed(fn, repeats: int, warmup: int = 1) -> list[float]:
    """Milliseconds of ``fn()`` per repeat (``fn`` returns a thunk to time, built untimed)."""
    out = []
    for i in range(warmup + repeats):
        thunk = fn()
        gc.collect()
        t0 = CLOCK()
        thunk()
        ms = (CLOCK() - t0) * 1e3
        if i >= warmup:
            out.append(ms)
    return out


def ar_floor(t: dict) -> None:
    """One pass that only reads ar's inputs: one output buffer, updated in place, one sum."""
    w = torch.exp(t["old_log_probs"])
    w.mul_(AR_ALPHA).add_(1 - AR_ALPHA).mul_(t["response_mask"])
    w.sum()


def ar_floor_literal(t: dict) -> None:
    """The same, written as the plain expression (each operator allocates)."""
    w = (AR_ALPHA * t["old_log_probs"].exp() + (1 - AR_ALPHA)) * t["response_mask"]
    w.sum()


def exp_only(t: dict) -> None:
    """A lower bound of any fused pass: one new [B, T] buffer written from old_log_probs."""
    torch.exp(t["old_log_probs"])


def read_floor(t: dict) -> None:
    """Read every per-token input once (advantages, old log-probs, mask), nothing else."""
    t["advantages"].sum()
    t["old_log_probs"].sum()
    m = t["response_mask"]
    if m.shape[1] % 8 == 0:
        m.view(torch.int64).sum()
    else:
        m.sum()


@dataclass
class Row:
    preset: str
    size: str
    B: int
    T: int
    vec_ms: float
    vec_min_ms: float
    loop_ms: float
    ratio: float
    floor_ms: float | None = None
    floor_ratio: float | None = None
    ms_ok: bool | None = None
    ratio_ok: bool | None = None
    floor_ok: bool | None = None
    load: float = 0.0        # 1-minute load average of the machine when the row was timed


def wait_for_quiet(max_load: float | None, patience_s: float = 300.0) -> float:
    """Wait (at most ``patience_s``) until the 1-minute load average is <= ``max_load``."""
    deadline = time.monotonic() + patience_s
    while max_load is not None and os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5.0)
    return os.getloadavg()[0]


def bench_preset(name: str, size: str, t: dict, repeats: int, loop_repeats: int,
                 floors: dict, max_load: float | None = None) -> Row:
    agree(name, t)
    load = wait_for_quiet(max_load)
    strategy, loop = Strategy(strategy_spec(name), domains=DOMAINS), loop_for(name)
    vec = timed(lambda: (lambda b=make_batch(t): strategy.decide(b)), repeats)
    ref = timed(lambda: (lambda: loop(t)), loop_repeats)
    v, lp = statistics.median(vec), statistics.median(ref)
    B, T = t["response_mask"].shape
    row = Row(name, size, B, T, v, min(vec), lp, lp / v, load=load)
    if name in TOKEN_LEVEL:
        row.floor_ms = floors["ar"]
        row.floor_ratio = v / row.floor_ms
        row.floor_ok = row.floor_ratio <= MAX_FLOOR_RATIO
    elif name not in REFERENCE:
        row.ms_ok, row.ratio_ok = v <= MAX_MS, row.ratio >= MIN_RATIO
    return row


def yn(x: bool | None) -> str:
    return "-" if x is None else ("y" if x else "n")


def print_row(r: Row) -> None:
    floor = "" if r.floor_ms is None else f"  floor {r.floor_ms:8.2f} ms  x{r.floor_ratio:4.2f}"
    if r.floor_ms is not None:
        target = f"<=2x floor: {yn(r.floor_ok)}"
    else:
        target = f"<=10ms: {yn(r.ms_ok)}  >=25x: {yn(r.ratio_ok)}"
    print(f"{r.preset:11s} {r.size:6s} {r.vec_ms:9.2f} {r.vec_min_ms:9.2f} {r.loop_ms:10.1f} "
          f"{r.ratio:8.1f}x {r.load:5.1f}  {target}{floor}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="all",
                    help="small | medium | large | all, or a comma list (default all)")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats per preset (median)")
    ap.add_argument("--loop-repeats", type=int, default=None,
                    help="timed repeats of the loop baseline (default: min(repeats, 3))")
    ap.add_argument("--presets", default="", help="comma list (default: every preset)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wait-quiet", type=float, default=None, metavar="LOAD",
                    help="before each preset, wait (up to 5 min) for the 1-minute load average "
                         "to drop to LOAD: 2-thread timings are meaningless on a busy machine")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default) or process CPU time (steadier on a busy machine)")
    ap.add_argument("--out", default=None,
                    help="write <out>.csv and <out>.json (e.g. benchmarks/results/overhead)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    sizes = list(SIZES) if args.sizes == "all" else args.sizes.split(",")
    presets = args.presets.split(",") if args.presets else list(PRESETS)
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s!r}; choose from {', '.join(SIZES)} or all")
    for p in presets:
        if p not in PRESETS:
            ap.error(f"unknown preset {p!r}; presets: {', '.join(PRESETS)}")
    loop_repeats = args.loop_repeats or min(args.repeats, 3)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"median of "
          f"{args.repeats} (loop: {loop_repeats}) after one warm-up call")
    rows: list[Row] = []
    for size in sizes:
        prompts, G, T = SIZES[size]
        t = make_tensors(prompts, G, T)
        B = t["rewards"].shape[0]
        floors = {"ar": statistics.median(timed(lambda: (lambda: ar_floor(t)), args.repeats))}
        lit = statistics.median(timed(lambda: (lambda: ar_floor_literal(t)), args.repeats))
        exp1 = statistics.median(timed(lambda: (lambda: exp_only(t)), args.repeats))
        rd = statistics.median(timed(lambda: (lambda: read_floor(t)), args.repeats))
        build = statistics.median(timed(lambda: (lambda: make_batch(t)), args.repeats))
        print(f"\n== {size}: {prompts} prompts x {G} = {B} rows (4 padding), T = {T}; "
              f"ar floor {floors['ar']:.2f} ms (as one expression: {lit:.2f} ms; "
              f"torch.exp alone: {exp1:.2f} ms); "
              f"reading adv + old_log_probs + mask once: {rd:.2f} ms; "
              f"building the RolloutBatch: {build:.2f} ms")
        print(f"{'preset':11s} {'size':6s} {'vec ms':>9s} {'vec min':>9s} {'loop ms':>10s} "
              f"{'ratio':>9s} {'load':>5s}  target")
        for name in presets:
            row = bench_preset(name, size, t, args.repeats, loop_repeats, floors,
                               args.wait_quiet)
            rows.append(row)
            print_row(row)
        del t
        gc.collect()
    largest = [r for r in rows if r.size == sizes[-1]]
    print(f"\n== targets at {sizes[-1]}")
    resp = [r for r in largest if r.ms_ok is not None]
    if resp:
        miss_ms = [f"{r.preset} ({r.vec_ms:.1f} ms)" for r in resp if not r.ms_ok]
        miss_ratio = [f"{r.preset} ({r.ratio:.0f}x)" for r in resp if not r.ratio_ok]
        print(f"response/group-level <= {MAX_MS:g} ms: "
              f"{len(resp) - len(miss_ms)}/{len(resp)} met"
              + (f"; missed: {', '.join(miss_ms)}" if miss_ms else ""))
        print(f"response/group-level >= {MIN_RATIO:g}x loop: "
              f"{len(resp) - len(miss_ratio)}/{len(resp)} met"
              + (f"; missed: {', '.join(miss_ratio)}" if miss_ratio else ""))
    for r in largest:
        if r.floor_ok is not None:
            print(f"{r.preset} within {MAX_FLOOR_RATIO:g}x of its floor: {yn(r.floor_ok)} "
                  f"({r.vec_ms:.1f} ms vs {r.floor_ms:.1f} ms, x{r.floor_ratio:.2f})")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        records = [asdict(r) for r in rows]
        with open(out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(records[0]))
            w.writeheader()
            w.writerows(records)
        meta = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                "repeats": args.repeats, "loop_repeats": loop_repeats, "rows": records}
        out.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
