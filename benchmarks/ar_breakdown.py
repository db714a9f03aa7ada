"""Where the time of the token-level ``ar`` decision goes: memory or arithmetic.

``strategy_overhead.py`` times ar's decision plus its weights written into a host buffer
against one fused read-and-write pass over the [B, T] tensor (target: within 10x). This
splits that time by step of the plain path, at 1 thread, on the same batch:

* ``score``: ``token_prob`` makes p = exp(min(old_log_prob, 0)), 0 off the valid tokens of
  active rows (a new [B, T] tensor, then clamp and mask in place);
* ``raw weights``: ``ar`` makes alpha * p + (1 - alpha) (a new [B, T] tensor);
* ``normalization``: `normalized_weights` (the masked row sums of the raw weights, chunked);
* ``decide``: the whole decision (the three above, metrics, and freeing p);
* ``write``: `Decision.write_weights_per_token` into the host's buffer; ``drop``: freeing
  the decision (its raw weights);

and times apart what a new [B, T] float32 tensor costs before any arithmetic (``new +
first write``: ``torch.empty`` and ``fill_``; ``free``: dropping it), against ``fill_`` into
memory already written, and the arithmetic passes into preallocated memory: exp, clamp,
the masked ``where``, the masked row sums, the fused pass itself. The last lines add them up
in units of the fused pass.

``--gap S`` sleeps S seconds before each timed round (a training step between decisions);
the round's first two new tensors (``score``, ``raw weights``) are then what a decision
pays once per training step, and ``decide`` what it pays right after another.

The allocator's settings matter here: torch takes a block this large from the C allocator,
which maps it fresh and unmaps it on free. ``--allocators`` runs the breakdown once per
setting, each in a fresh process (torch reads ``THP_MEM_ALLOC_ENABLE`` at its first
allocation, glibc its variables at start), and prints them side by side (docs/performance.md):

* ``default``: none of `strategy_overhead.ALLOCATOR_ENV` set (4 KiB pages);
* ``thp``: ``THP_MEM_ALLOC_ENABLE=1``, torch's CPU allocator asks for transparent huge pages
  (2 MiB) for blocks of 2 MiB and more;
* ``keep``: glibc keeps freed memory (``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=16 GiB``):
  the process holds its peak memory.

``--allocators current`` runs in this process, with whatever the environment sets.

Usage::

    .venv/bin/python benchmarks/ar_breakdown.py --repeats 5 --clock cpu            # default, thp
    .venv/bin/python benchmarks/ar_breakdown.py --repeats 5 --clock cpu --gap 3 \\
        --allocators default,thp,keep
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # strategy_overhead, as a script

import strategy_overhead as so  # noqa: E402

from dataflex_rl import Strategy  # noqa: E402
from dataflex_rl.core.base import checked_scores  # noqa: E402
from dataflex_rl.core.batch import informative_mask  # noqa: E402
from dataflex_rl.core.rowops import masked_row_sums  # noqa: E402
from dataflex_rl.core.strategy import normalized_weights  # noqa: E402

PATH_STEPS = ("score", "raw weights", "normalization", "decide", "write", "drop")
MEMORY = ("new + first write", "free", "fill (written memory)")
ARITHMETIC = ("exp", "clamp", "mask (where)", "masked row sums", "fused pass")
#: the settings ``--allocators`` knows: the environment each runs with (beside the others unset)
ALLOCATORS = {
    "default": {},
    "thp": {"THP_MEM_ALLOC_ENABLE": "1"},
    "keep": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(16 << 30)},
}


def new_written(shape) -> torch.Tensor:
    """A new float32 tensor, written once (its pages faulted in)."""
    return torch.empty(shape).fill_(1.0)


def one_round(t: dict, strategy: Strategy, out: torch.Tensor, clock) -> dict[str, float]:
    """Milliseconds of each step, one round (a fresh batch, built untimed)."""
    ms: dict[str, float] = {}

    def tick(name: str, fn, *args, **kwargs):
        gc.collect()
        t0 = clock()
        result = fn(*args, **kwargs)
        ms[name] = (clock() - t0) * 1e3
        return result

    def tick_free(name: str, holder: list) -> None:  # drop the last reference to holder[0]
        gc.collect()
        t0 = clock()
        holder.clear()
        ms[name] = (clock() - t0) * 1e3

    scorer, reweighter = strategy.parts["reweight"]
    b = so.make_batch(t)
    kept = b.active_mask & (b.response_length > 0)
    norm_set = kept & informative_mask(b)
    p = tick("score", checked_scores, scorer, b)
    raw = tick("raw weights", reweighter.raw_weights, p, b, norm_set)
    tick("normalization", normalized_weights, raw, b, kept, norm_set)
    p = raw = None
    held = [tick("decide", strategy.decide, b)]
    tick("write", held[0].write_weights_per_token, out)
    tick_free("drop", held)  # the decision's tensors, its raw weights included
    held = [tick("new + first write", new_written, out.shape)]
    tick_free("free", held)
    tick("fill (written memory)", out.fill_, 1.0)
    lp, mask = t["old_log_probs"], t["response_mask"]
    tick("exp", torch.exp, lp, out=out)
    tick("clamp", out.clamp_, max=1.0)
    tick("mask (where)", torch.where, mask, out, torch.zeros(()), out=out)
    tick("masked row sums", masked_row_sums, out, mask)
    scale, offset = torch.rand(lp.shape[0], 1), torch.rand(lp.shape[0], 1)
    tick("fused pass", so.fused_pass, t, out, scale, offset)
    return ms


def run_here(args: argparse.Namespace) -> None:
    """The breakdown in this process, printed (allocator: as the environment sets it)."""
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    t = so.make_tensors(*so.SIZES[args.size])
    t.update(so.per_response_inputs(t))
    strategy = Strategy("ar", domains=so.DOMAINS)
    out = torch.empty(t["response_mask"].shape).fill_(0.0)  # the host's buffer, written once
    print(
        f"torch {torch.__version__}, 1 thread, {args.clock} clock, median of {args.repeats} "
        f"after one warm-up round, {args.gap:g} s before each; {args.size} "
        f"{tuple(out.shape)}; {so.allocator_settings()}"
    )
    rounds = []
    for i in range(args.repeats + 1):
        time.sleep(args.gap)
        r = one_round(t, strategy, out, clock)
        if i:
            rounds.append(r)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    fused = med["fused pass"]
    for group, names in (("ar path", PATH_STEPS), ("memory", MEMORY), ("arithmetic", ARITHMETIC)):
        print(f"-- {group}")
        for k in names:
            print(f"{k:24s} {med[k]:8.1f} ms  x{med[k] / fused:5.2f} the fused pass")
    total = med["decide"] + med["write"] + med["drop"]
    memory = 2 * (med["new + first write"] - med["fill (written memory)"] + med["free"])
    print(
        f"decide + write + drop: {total:.1f} ms = x{total / fused:.2f} the fused pass; of it, "
        f"two new [B, T] tensors (first write beyond a fill of written memory, and free): "
        f"{memory:.1f} ms = x{memory / fused:.2f}; the rest {total - memory:.1f} ms = "
        f"x{(total - memory) / fused:.2f}"
    )
    first = med["score"] + med["raw weights"]
    print(
        f"summary: decide + write + drop x{total / fused:.2f} the fused pass; the round's "
        f"first two new tensors (score + raw weights) {first:.1f} ms; a new [B, T] and its "
        f"first write {med['new + first write']:.1f} ms",
        flush=True,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="large", choices=list(so.SIZES))
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    ap.add_argument("--gap", type=float, default=0.0, help="seconds of sleep before each round")
    ap.add_argument(
        "--allocators",
        default="default,thp",
        help=f"comma-separated settings, each in a fresh process: {', '.join(ALLOCATORS)}; "
        "or 'current' (this process, as the environment sets it)",
    )
    args = ap.parse_args(argv)
    names = args.allocators.split(",")
    if names == ["current"]:
        run_here(args)
        return 0
    for name in names:
        if name not in ALLOCATORS:
            ap.error(f"--allocators: unknown setting {name!r}; choose from {', '.join(ALLOCATORS)}")
    summaries = []
    for name in names:
        env = {k: v for k, v in os.environ.items() if k not in so.ALLOCATOR_ENV}
        env.update(ALLOCATORS[name])
        print(f"== {name}", flush=True)
        cmd = [sys.executable, __file__, "--allocators", "current", "--size", args.size]
        cmd += ["--repeats", str(args.repeats), "--clock", args.clock, "--gap", str(args.gap)]
        out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        print(out, end="", flush=True)
        summaries += [
            f"{name:8s} {line}" for line in out.splitlines() if line.startswith("summary")
        ]
    print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
