"""How much a data strategy costs a training step, against a per-group Python loop.

Times ``Strategy(preset, domains=...).decide(batch)`` -- the whole decision a host pays for,
metrics included -- for every preset, next to a straightforward per-group loop implementation
of the same preset (`loop_baselines.py`, checked to agree before timing; ``--skip-loops`` skips
both). Each preset is timed three ways in the same run:

* ``1 thr``: torch at 1 thread;
* ``host``: torch at ``--threads`` (the host's setting), the Strategy's default ``threads=1``
  (the decision scopes torch to 1 thread and restores the host's count); these two are timed
  in alternate calls, so load from other work weighs on both alike;
* ``free``: torch at ``--threads`` with ``Strategy(threads=None)``: the decision's ops use
  every thread, which is what every decision did before the ``threads`` option.

and, with ``--inputs both`` (default), twice: ``token`` batches carry only [B, T] advantages
and old log-probs; ``response`` batches also carry what a GRPO host has per response
(``response_advantages``, ``response_lengths``), so response- and group-level decisions
read no [B, T] tensor at all. ``--load N`` then repeats everything next to N busy processes.

Targets at the largest size (512 prompts x 16 samples, 4096 tokens):

* every response- or group-level preset: <= 5 ms (``host`` column) with per-response inputs;
* the token-level ``ar``, in plain torch: the decision plus writing its [B, T] weights into a
  host buffer (``Decision.write_weights_per_token``: what a host must do to apply them)
  within 10x of one fused read-and-write pass over the [B, T] tensor (``torch.addcmul`` into
  a preallocated output), both at 1 thread, timed alternately in the same rounds. Also
  shown: the decision alone, and decision + ``weights_per_token`` (a new tensor) against the
  fused pass into a new one. (Issue 13 set 1.5x and met it with compiled C kernels; issue 25
  withdrew that target and removed the kernels: a model step takes seconds.)
* under ``--load``: no preset's ``host`` time more than 2x its ``1 thr`` time.

The batch is built untimed. Building it validates every field given, the per-token ones
included (a pass over each [B, T] float tensor); the header prints what that costs, and a
decision that reads fewer per-token fields than the host passed builds its view of the batch
without them (`RolloutBatch.reading`) inside the timed call.

Mixing presets run with ``warmup_steps: 0, every: 1``, so every timed call observes the batch
and updates the proportions.

What makes a decision cheap (issue 13, item 4):

* **Lazy reads.** A decision reads only the per-token fields its components declare
  (`Strategy.reads`, `RolloutBatch.reading`): difffilter no longer validates
  ``old_log_probs`` (before: one full read of a [B, T] float tensor, ~40% of its time).
  Validation of a token field (its non-finite rows) happens on its first read, once.
* **Per-response inputs.** With ``response_advantages`` and ``response_lengths`` every
  response- and group-level preset works on [B] tensors only; nothing [B, T] is read.
* **Threads.** Under a background load a 2-thread decision was many times slower than a
  1-thread one. Cause: every torch op over more than ~32k elements opens an OpenMP parallel
  region, and a region ends only when its slowest thread does; when the other busy processes
  have a core, the second thread waits for a time slice (milliseconds), once per region. A
  token-level decision runs hundreds of such regions (chunked passes), so it pays hundreds of
  waits. [B]-sized ops stay below torch's grain size and never open a region. Options:
  (a) chunks below the grain size (8 rows of 4096 tokens) open no region, but cost dispatch
  (the exp-and-sum pass took 77 ms of CPU against 53 ms with 64-row chunks, 1 thread) and
  lose the second thread everywhere; (b) a scoped ``torch.set_num_threads`` around the
  decision: torch's OpenMP count is per calling thread once that thread has used torch, so
  other threads keep theirs, and the save/restore costs ~15 us (printed in the header). (b) is the
  ``Strategy(threads=1)`` default: the host keeps its own setting, the decision runs at 1
  thread, and ``threads=None`` keeps the old behaviour (the ``free`` column).
* **Token level (ar): plain torch.** The scorer makes p_t = exp(old_log_prob_t) [B, T] (exp,
  clamp and mask in place, a chunk of rows at a time so the clamp and mask run in cache), the
  reweighter its raw weights alpha * p + (1 - alpha) [B, T], the
  strategy their row sums over the valid tokens (a chunk of rows at a time, `core.rowops`: 1 MiB
  temporaries) and a scale and offset per row; the host's buffer gets raw * scale + offset on
  the kept valid tokens (also by chunks of rows). Those two are the only new [B, T] tensors
  of the path, and the plain interface needs both (neither component may write into a tensor
  it did not make). On CPU a block this large comes fresh from the C allocator (4 KiB page
  faults on the first write: ~40-60 ms each at the largest size, ~10 ms to unmap it when
  freed); the arithmetic (exp, the row sums, the write) is the rest. Whole-tensor masking
  passes (``torch.where`` over [B, T]) cost ~2x a fused pass each; by chunks of rows the
  decision + write went from 9.7x to 8.5x the fused pass on a quiet machine (issue 25,
  results file). Where the allocator keeps freed memory (glibc: ``MALLOC_MMAP_MAX_=0
  MALLOC_TRIM_THRESHOLD_=<large>``: the process keeps its peak memory) the page faults go;
  ``THP_MEM_ALLOC_ENABLE=1`` (2 MiB pages) looks fast back to back but on this VM is slower
  with seconds between decisions (docs/performance.md; ``ar_breakdown.py --gap 3
  --allocators default,thp,keep`` measures it). The header prints
  these settings. On a GPU the caching allocator reuses memory. See the results file.

Measured figures, dated, with their commands: ``benchmarks/results/strategy_overhead.md``.

Usage::

    .venv/bin/python benchmarks/strategy_overhead.py --sizes large --load        # the targets
    .venv/bin/python benchmarks/strategy_overhead.py --sizes small --presets difffilter,ar
    .venv/bin/python benchmarks/strategy_overhead.py --threads 1 --clock cpu    # busy machine
    .venv/bin/python benchmarks/strategy_overhead.py --out benchmarks/results/overhead
"""

from __future__ import annotations

import argparse
import csv
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loop_baselines, when run as a script

import loop_baselines as loops  # noqa: E402

from dataflex_rl import Strategy  # noqa: E402
from dataflex_rl.core.batch import RolloutBatch  # noqa: E402
from dataflex_rl.core.strategy import Decision  # noqa: E402
from dataflex_rl.presets import PRESETS  # noqa: E402

#: this checkout's RolloutBatch takes per-response inputs / its Strategy a ``threads`` option
#: (the benchmark also runs against older checkouts, for before/after figures)
HAS_PER_RESPONSE = "response_advantages" in {f.name for f in fields(RolloutBatch)}
HAS_THREADS = "threads" in inspect.signature(Strategy).parameters
#: ... and its Decision writes token weights into a host buffer
HAS_WRITE = hasattr(Decision, "write_weights_per_token")
#: ... and its Strategy takes ``native`` (compiled token kernels for ar; removed in issue 25)
HAS_NATIVE = "native" in inspect.signature(Strategy).parameters
#: a preset name with this suffix runs with Strategy(native=False): the torch path, timed next
#: to the default (kernels) for comparison
TORCH_SUFFIX = "[torch]"

#: name -> (prompts, samples per prompt G, response tokens T)
SIZES = {"small": (64, 8, 1024), "medium": (256, 8, 2048), "large": (512, 16, 4096)}
DOMAINS = ("math", "logic", "science")
MIX_PRESETS = loops.MIXERS
TOKEN_LEVEL = ("ar", "ar" + TORCH_SUFFIX, "high_entropy")
REFERENCE = ("baseline",)  # no mechanism: shown, but no target applies
MAX_MS, MAX_FUSED_RATIO = 5.0, 10.0


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
    p_solve = torch.where(
        u < 0.25, 0.0, torch.where(u > 5 / 6, 1.0, torch.rand(prompts, generator=g))
    )
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
    # entropies from a generator of their own (the other inputs are what they were without
    # them), passed only to the presets that read them (`for_preset`)
    e = torch.Generator().manual_seed(seed + 1)
    entropies = torch.empty(mask.shape).exponential_(1.0, generator=e).mul_(mask)
    return {
        "entropies": entropies,
        "rewards": rewards,
        "response_mask": mask,
        "advantages": advantages,
        "old_log_probs": old_log_probs,
        "group_ids": group,
        "domain_ids": domain,
        "is_padding": is_padding,
    }


def per_response_inputs(t: dict) -> dict:
    """The per-response inputs a GRPO host has: each response's advantage (constant over its
    tokens) and its length."""
    n = t["response_mask"].sum(1)
    return {
        "response_advantages": torch.where(n > 0, t["advantages"][:, 0], 0.0),
        "response_lengths": n,
    }


def for_preset(name: str, t: dict) -> dict:
    """``t`` as a host gives it to ``name``: with entropies only when the preset reads them
    (hosts compute them only then)."""
    if "entropies" in Strategy(strategy_spec(name), domains=DOMAINS).reads:
        return t
    return {k: v for k, v in t.items() if k != "entropies"}


def make_batch(t: dict, step: int = 0) -> RolloutBatch:
    return RolloutBatch(domains=DOMAINS, step=step, **t)


def base_name(name: str) -> str:
    return name.removesuffix(TORCH_SUFFIX)


def strategy_kwargs(name: str) -> dict:
    return {"native": False} if name.endswith(TORCH_SUFFIX) and HAS_NATIVE else {}


def strategy_spec(name: str):
    name = base_name(name)
    if name in MIX_PRESETS:  # update the proportions on every call
        return {"name": name, "mix": {"preset": name, "warmup_steps": 0, "every": 1}}
    return name


def loop_for(name: str):
    name = base_name(name)
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
        assert torch.allclose(scores[diff], cut.expand(int(diff.sum())), rtol=1e-5), (
            f"{name}: keep masks differ beyond rounding ties"
        )
    else:
        assert torch.equal(keep, ref_keep), f"{name}: keep masks differ"
    if "weights" in ref:
        torch.testing.assert_close(
            decision.weights_per_response.double(),
            ref["weights"],
            rtol=1e-5,
            atol=1e-6,
            msg=f"{name}: weights differ",
        )
    if "token_weights" in ref:
        torch.testing.assert_close(
            decision.weights_per_token,
            ref["token_weights"],
            rtol=1e-5,
            atol=1e-6,
            msg=f"{name}: token weights differ",
        )
    if "advantages" in ref:
        assert decision.advantages is not None, f"{name}: advantages not recomputed"
        expected = ref["advantages"][:, None].float() * t["response_mask"]
        torch.testing.assert_close(
            decision.advantages,
            expected,
            rtol=1e-5,
            atol=1e-5,
            msg=f"{name}: recomputed advantages differ",
        )
    if "proportions" in ref:
        assert decision.proportions is not None, f"{name}: no proportions update"
        torch.testing.assert_close(
            decision.proportions,
            ref["proportions"],
            rtol=1e-6,
            atol=1e-9,
            msg=f"{name}: proportions differ",
        )


def agree(name: str, t: dict) -> None:
    """Fresh strategy and loop; three steps for mixers (rewards shifted per step)."""
    t = for_preset(name, t)
    strategy = Strategy(strategy_spec(name), domains=DOMAINS, **strategy_kwargs(name))
    loop = loop_for(name)
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


def exp_only(t: dict, out: torch.Tensor) -> None:
    """exp of every old log-prob into a preallocated [B, T] buffer: what any exact ``ar``
    pass must compute, whatever else it does."""
    torch.exp(t["old_log_probs"], out=out)


def exp_sum_floor(t: dict, buf: torch.Tensor, ones: torch.Tensor) -> None:
    """The floor of the ``ar`` decision in eager torch: B row sums of exp(old_log_prob) with
    one read of the tensor (a chunk of rows at a time: exp into a cache-resident buffer,
    summed by a matrix-vector product), no masking and no validity check."""
    x = t["old_log_probs"]
    R = buf.shape[0]
    for i in range(0, x.shape[0], R):
        c = x[i : i + R]
        b = buf[: c.shape[0]]
        torch.mv(torch.exp(c, out=b), ones)


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
    inputs: str  # "token" ([B, T] tensors only) or "response" (+ per-response)
    B: int
    T: int
    ms_1t: float  # torch at 1 thread
    ms_host: float  # torch at --threads, the Strategy's default (threads=1)
    ms_free: float | None  # torch at --threads, Strategy(threads=None): the decision's ops
    # use every thread (what every decision did before)
    loop_ms: float | None
    ratio: float | None
    loaded: bool = False  # timed while --load busy processes ran
    fused_ms: float | None = None  # one fused read-and-write pass, 1 thread
    fused_ratio: float | None = None  # apply_ms / fused_ms (token-level presets): the target
    read_ms: float | None = None  # decide + reading weights_per_token (new [B, T]), 1 thread
    apply_ms: float | None = None  # decide + write_weights_per_token(host buffer), 1 thread
    fused_new_ms: float | None = None  # the fused pass into a new [B, T] tensor, 1 thread
    ms_ok: bool | None = None
    fused_ok: bool | None = None
    threads_ok: bool | None = None  # ms_host <= 2 x ms_1t
    load: float = 0.0  # 1-minute load average of the machine when the row was timed


def wait_for_quiet(max_load: float | None, patience_s: float = 300.0) -> float:
    """Wait (at most ``patience_s``) until the 1-minute load average is <= ``max_load``."""
    deadline = time.monotonic() + patience_s
    while max_load is not None and os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5.0)
    return os.getloadavg()[0]


class BusyLoad:
    """``n`` background processes spinning in pure Python (each wants one full core)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> BusyLoad:
        code = (
            "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "while True:\n    pass\n"
        )
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(0.5)  # let them get on the CPUs
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:  # only the processes this object started, by pid
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def with_threads(n: int, fn):
    """``fn`` called with torch at ``n`` threads (the previous count restored)."""

    def run():
        prev = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(prev)

    return run


def time_decision(
    name: str,
    t: dict,
    repeats: int,
    torch_threads: int,
    strategy_threads: int | None | str = "default",
    read: bool = False,
    into: torch.Tensor | None = None,
) -> float:
    """Median ms of ``decide`` (with ``read``: and of reading its [B, T] token weights, a new
    tensor; with ``into``: and of writing them into that host buffer)."""
    kw = {} if strategy_threads == "default" else {"threads": strategy_threads}
    strategy = Strategy(strategy_spec(name), domains=DOMAINS, **kw, **strategy_kwargs(name))
    if into is not None:

        def call(b):
            return strategy.decide(b).write_weights_per_token(into)
    elif read:

        def call(b):
            return strategy.decide(b).weights_per_token
    else:
        call = strategy.decide

    def thunk():  # a fresh batch per repeat, built untimed
        b = make_batch(t)
        return lambda: call(b)

    xs = with_threads(torch_threads, lambda: timed(thunk, repeats))()
    return statistics.median(xs)


def time_pair(name: str, t: dict, repeats: int, threads: int) -> tuple[float, float]:
    """Median ms of ``decide`` with torch at 1 thread and at ``threads`` (the Strategy's
    default), timed one after the other in each of ``repeats`` rounds (after a warm-up round):
    under ``--load`` a millisecond decision is slowed mostly by when the scheduler runs it,
    and alternating rounds give both columns the same luck."""
    strategy = Strategy(strategy_spec(name), domains=DOMAINS, **strategy_kwargs(name))
    one, host = [], []
    for i in range(repeats + 1):
        for n, out in ((1, one), (threads, host)):
            b = make_batch(t)
            gc.collect()

            def call(b=b):
                t0 = CLOCK()
                strategy.decide(b)
                return (CLOCK() - t0) * 1e3

            ms = with_threads(n, call)()
            if i:
                out.append(ms)
    return statistics.median(one), statistics.median(host)


def interleaved(name: str, t: dict, repeats: int, out: torch.Tensor, fused_call) -> tuple:
    """Median ms of (decide + write_weights_per_token(out), the fused pass into ``out``), at 1
    thread, timed one after the other in each of ``repeats`` rounds (after a warm-up round)."""
    strategy = Strategy(strategy_spec(name), domains=DOMAINS, **strategy_kwargs(name))

    def rounds():
        apply, fused = [], []
        for i in range(repeats + 1):
            b = make_batch(t)
            gc.collect()
            t0 = CLOCK()
            fused_call()
            t1 = CLOCK()
            gc.collect()
            t2 = CLOCK()
            strategy.decide(b).write_weights_per_token(out)
            t3 = CLOCK()
            if i:
                fused.append((t1 - t0) * 1e3)
                apply.append((t3 - t2) * 1e3)
        return statistics.median(apply), statistics.median(fused)

    return with_threads(1, rounds)()


def bench_preset(
    name: str,
    size: str,
    inputs: str,
    t: dict,
    repeats: int,
    loop_repeats: int,
    fused: tuple[float, float, torch.Tensor],
    threads: int,
    loaded: bool,
    loops_too: bool,
    max_load: float | None = None,
) -> Row:
    if loops_too:
        agree(name, t)
    load = wait_for_quiet(max_load)
    ms_1t, ms_host = time_pair(name, t, repeats, threads)
    ms_free = time_decision(name, t, repeats, threads, None) if HAS_THREADS else None
    lp = None
    if loops_too:
        loop = loop_for(name)
        lp = statistics.median(timed(lambda: lambda: loop(t), loop_repeats))
    B, T = t["response_mask"].shape
    row = Row(
        name,
        size,
        inputs,
        B,
        T,
        ms_1t,
        ms_host,
        ms_free,
        lp,
        None if lp is None else lp / ms_host,
        loaded,
        load=load,
    )
    row.threads_ok = ms_host <= 2 * ms_1t
    if name in TOKEN_LEVEL:
        row.fused_ms, row.fused_new_ms, out, fused_call = fused
        row.read_ms = time_decision(name, t, repeats, 1, read=True)
        if HAS_WRITE:
            # the target's two sides timed alternately, so other work on the machine weighs
            # on both alike; the fused figure shown is the one of these alternate calls
            row.apply_ms, row.fused_ms = interleaved(name, t, repeats, out, fused_call)
        # (an older checkout without write_weights_per_token: a new [B, T] copied into it)
        row.fused_ratio = (row.apply_ms or row.read_ms) / row.fused_ms
        row.fused_ok = row.fused_ratio <= MAX_FUSED_RATIO
    elif name not in REFERENCE:
        row.ms_ok = ms_host <= MAX_MS
    return row


def yn(x: bool | None) -> str:
    return "-" if x is None else ("y" if x else "n")


def fmt(x: float | None, w: int = 8, d: int = 2) -> str:
    return f"{'-':>{w}s}" if x is None else f"{x:{w}.{d}f}"


def print_header() -> None:
    print(
        f"{'preset':11s} {'inputs':8s} {'1 thr':>8s} {'host':>8s} {'free':>9s} "
        f"{'host/1':>6s} {'free/1':>7s} {'loop ms':>9s} {'loop/x':>7s} {'load':>5s}  target"
    )


def print_row(r: Row) -> None:
    free = fmt(r.ms_free, 9)
    free_ratio = "-" if r.ms_free is None else f"{r.ms_free / r.ms_1t:.1f}"
    if r.fused_ms is not None:
        target = (
            f"decide + weights into a host buffer {fmt(r.apply_ms, 1, 1)} ms "
            f"<={MAX_FUSED_RATIO:g}x "
            f"fused ({r.fused_ms:.2f} ms): {yn(r.fused_ok)} x{r.fused_ratio:.2f}; decide alone "
            f"x{r.ms_1t / r.fused_ms:.2f}; decide + weights_per_token (new [B, T]) "
            f"{r.read_ms:.1f} ms vs the fused pass into a new [B, T] {r.fused_new_ms:.1f} ms: "
            f"x{r.read_ms / r.fused_new_ms:.2f}"
        )
    elif r.ms_ok is not None:
        target = f"<={MAX_MS:g}ms: {yn(r.ms_ok)}"
    else:
        target = "(reference)"
    target += f"  host<=2x 1thr: {yn(r.threads_ok)}"
    loop_ratio = "-" if r.ratio is None else f"{r.ratio:.0f}x"
    print(
        f"{r.preset:11s} {r.inputs:8s} {r.ms_1t:8.2f} {r.ms_host:8.2f} {free} "
        f"{r.ms_host / r.ms_1t:6.1f} {free_ratio:>7s} {fmt(r.loop_ms, 9, 1)} "
        f"{loop_ratio:>7s} {r.load:5.1f}  {target}",
        flush=True,
    )


def fused_pass(
    t: dict, out: torch.Tensor | None, scale: torch.Tensor, offset: torch.Tensor
) -> torch.Tensor:
    """The fused baseline: one read of the [B, T] float32 token tensor and one write of a
    [B, T] output (``offset + x * scale`` with per-row scale and offset): ``out``, a
    preallocated buffer, or a new tensor when None (its page faults included, like any op
    that returns a new [B, T] tensor)."""
    if out is None:
        return torch.addcmul(offset, t["old_log_probs"], scale)
    return torch.addcmul(offset, t["old_log_probs"], scale, out=out)


#: environment variables that change what a new [B, T] tensor costs on CPU (see the module doc)
ALLOCATOR_ENV = (
    "THP_MEM_ALLOC_ENABLE",
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
)


def allocator_settings() -> str:
    """The allocator settings of this process, for the header: ``NAME=value`` of each
    `ALLOCATOR_ENV` variable that is set, ``THP_MEM_ALLOC_ENABLE=unset`` always shown."""
    shown = [f"{k}={os.environ[k]}" for k in ALLOCATOR_ENV if k in os.environ]
    if "THP_MEM_ALLOC_ENABLE" not in os.environ:
        shown.insert(0, "THP_MEM_ALLOC_ENABLE=unset")
    return ", ".join(shown)


def scope_cost_us(threads: int, n: int = 2000) -> float:
    """Microseconds of one `intra_op_threads(1)` enter + exit when torch is at ``threads``."""
    from dataflex_rl.core.strategy import intra_op_threads

    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            with intra_op_threads(1):
                pass
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        torch.set_num_threads(prev)


def run_size(
    size: str, presets: list[str], inputs_modes: list[str], args, loop_repeats: int, loaded: bool
) -> list[Row]:
    prompts, G, T = SIZES[size]
    base = make_tensors(prompts, G, T)
    B = base["rewards"].shape[0]
    out = torch.empty_like(base["old_log_probs"])
    scale = torch.rand(B, 1)
    offset = torch.rand(B, 1)

    def fused_thunk():
        return lambda: fused_pass(base, out, scale, offset)

    def read_thunk():
        return lambda: read_floor(base)

    def exp_thunk():
        return lambda: exp_only(base, out)

    R = max(1, (1 << 18) // T)
    buf, ones = torch.empty(R, T), torch.ones(T)

    def floor_thunk():
        return lambda: exp_sum_floor(base, buf, ones)

    def fused_new_thunk():
        return lambda: fused_pass(base, None, scale, offset)

    fused = {
        k: statistics.median(with_threads(k, lambda: timed(fused_thunk, args.repeats))())
        for k in (1, args.threads)
    }
    rd = statistics.median(timed(read_thunk, args.repeats))
    exp1 = statistics.median(with_threads(1, lambda: timed(exp_thunk, args.repeats))())
    floor1 = statistics.median(with_threads(1, lambda: timed(floor_thunk, args.repeats))())
    fused_new = statistics.median(with_threads(1, lambda: timed(fused_new_thunk, args.repeats))())
    resp_inputs = dict(base, **per_response_inputs(base))

    def build_ms(t: dict) -> float:  # building the RolloutBatch (validation), 1 thread
        return statistics.median(with_threads(1, lambda: timed(lambda: lambda: make_batch(t), 3))())

    build = {
        "token": build_ms(for_preset("baseline", base)),
        "response": build_ms(for_preset("baseline", resp_inputs)),
    }
    print(
        f"\n== {size}: {prompts} prompts x {G} = {B} rows (4 padding), T = {T}"
        f"{f' -- UNDER LOAD: {args.load} busy processes' if loaded else ''}\n"
        f"fused read-and-write pass (addcmul into a preallocated [B, T]): "
        f"{fused[1]:.2f} ms at 1 thread, {fused[args.threads]:.2f} ms at {args.threads}; "
        f"into a new [B, T]: {fused_new:.2f} ms at 1 thread; torch.exp into a preallocated "
        f"[B, T] (1 thread): {exp1:.2f} ms (x{exp1 / fused[1]:.2f} the fused pass); B row sums "
        f"of exp, chunked, no mask (the floor of an exact ar decision, 1 thread): "
        f"{floor1:.2f} ms (x{floor1 / fused[1]:.2f}); "
        f"reading adv + old_log_probs + mask once: {rd:.2f} ms; building the RolloutBatch "
        f"(untimed below; 1 thread): {build['token']:.1f} ms with token inputs, "
        f"{build['response']:.1f} ms with per-response inputs"
    )
    print_header()
    rows = []
    for inputs in inputs_modes:
        t = resp_inputs if inputs == "response" else base
        for name in presets:
            row = bench_preset(
                name,
                size,
                inputs,
                for_preset(name, t),
                args.repeats,
                loop_repeats,
                (fused[1], fused_new, out, lambda: fused_pass(base, out, scale, offset)),
                args.threads,
                loaded,
                not args.skip_loops and inputs == "token",
                args.wait_quiet,
            )
            rows.append(row)
            print_row(row)
    base = out = buf = resp_inputs = None  # free the [B, T] tensors before the next size
    gc.collect()
    return rows


def summarize(rows: list[Row], size: str, loaded: bool, threads: int) -> None:
    rows = [r for r in rows if r.size == size and r.loaded == loaded]
    if not rows:
        return
    print(f"\n== targets at {size}{' under load' if loaded else ''}")
    resp = [r for r in rows if r.ms_ok is not None and r.inputs == "response"]
    if resp and not loaded:
        miss = [f"{r.preset} ({r.ms_host:.1f} ms)" for r in resp if not r.ms_ok]
        print(
            f"response/group-level <= {MAX_MS:g} ms with per-response inputs: "
            f"{len(resp) - len(miss)}/{len(resp)} met"
            + (f"; missed: {', '.join(miss)}" if miss else "")
        )
    for r in rows:
        if r.fused_ok is not None:
            print(
                f"{r.preset} ({r.inputs} inputs): decision + its [B, T] weights written into a "
                f"host buffer within {MAX_FUSED_RATIO:g}x of the fused pass (1 thread): "
                f"{yn(r.fused_ok)} ({fmt(r.apply_ms, 1, 1)} ms vs {r.fused_ms:.1f} ms, "
                f"x{r.fused_ratio:.2f}); the decision alone {r.ms_1t:.1f} ms "
                f"(x{r.ms_1t / r.fused_ms:.2f}); with weights_per_token (a new [B, T]) "
                f"{r.read_ms:.1f} ms vs {r.fused_new_ms:.1f} ms for the fused pass into a new "
                f"[B, T] (x{r.read_ms / r.fused_new_ms:.2f})"
            )
    miss = [f"{r.preset}/{r.inputs} (x{r.ms_host / r.ms_1t:.1f})" for r in rows if not r.threads_ok]
    print(
        f"host at {threads} threads (Strategy default) no more than 2x the 1-thread time: "
        f"{len(rows) - len(miss)}/{len(rows)} met"
        + (f"; missed: {', '.join(miss)}" if miss else "")
    )
    free = [r for r in rows if r.ms_free is not None]
    if free:
        worst = max(free, key=lambda r: r.ms_free / r.ms_1t)
        print(
            f"for comparison, decisions using every thread (threads=None): worst "
            f"{worst.preset}/{worst.inputs} {worst.ms_free:.1f} ms vs {worst.ms_1t:.1f} ms "
            f"at 1 thread (x{worst.ms_free / worst.ms_1t:.1f})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes", default="all", help="small | medium | large | all, or a comma list (default all)"
    )
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats per preset (median)")
    ap.add_argument(
        "--loop-repeats",
        type=int,
        default=None,
        help="timed repeats of the loop baseline (default: min(repeats, 3))",
    )
    ap.add_argument(
        "--skip-loops",
        action="store_true",
        help="skip the loop baselines and the agreement check (saves CPU)",
    )
    ap.add_argument("--presets", default="", help="comma list (default: every preset)")
    ap.add_argument(
        "--inputs",
        choices=("token", "response", "both"),
        default="both",
        help="token: [B, T] advantages only; response: also response_advantages "
        "and response_lengths [B] (default: both)",
    )
    ap.add_argument("--threads", type=int, default=2, help="the host's torch thread count")
    ap.add_argument(
        "--load",
        type=int,
        default=None,
        nargs="?",
        const=os.cpu_count() or 2,
        metavar="N",
        help="after the normal run, time everything again next to N busy "
        "processes (default N: the number of CPUs)",
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="LOAD",
        help="before each preset, wait (up to 5 min) for the 1-minute load average "
        "to drop to LOAD (not with --load)",
    )
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (default) or process CPU time (steadier on a busy machine)",
    )
    ap.add_argument(
        "--no-torch-ar",
        action="store_true",
        help="time ar only as the Strategy runs it by default (compiled kernels when they "
        "build), not also its torch path (Strategy(native=False), row 'ar[torch]')",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="write <out>.csv and <out>.json (e.g. benchmarks/results/overhead)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    sizes = list(SIZES) if args.sizes == "all" else args.sizes.split(",")
    presets = args.presets.split(",") if args.presets else list(PRESETS)
    if HAS_NATIVE and "ar" in presets and not args.no_torch_ar:  # the torch path, for comparison
        presets.insert(presets.index("ar") + 1, "ar" + TORCH_SUFFIX)
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s!r}; choose from {', '.join(SIZES)} or all")
    for p in presets:
        if base_name(p) not in PRESETS:
            ap.error(f"unknown preset {p!r}; presets: {', '.join(PRESETS)}")
    modes = ["token", "response"] if args.inputs == "both" else [args.inputs]
    if not HAS_PER_RESPONSE and "response" in modes:
        print("this dataflex_rl has no per-response inputs: timing token inputs only")
        modes = ["token"]
    loop_repeats = args.loop_repeats or min(args.repeats, 3)
    print(
        f"torch {torch.__version__}, host at {args.threads} threads, {args.clock} clock, "
        f"median of {args.repeats} (loop: {loop_repeats}) after one warm-up call; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"{allocator_settings()}"
    )
    if HAS_THREADS:
        print(
            f"Strategy default threads={Strategy('baseline').threads}; the scoped thread "
            f"count costs {scope_cost_us(args.threads):.1f} us per decision"
        )
    rows: list[Row] = []
    for size in sizes:
        rows += run_size(size, presets, modes, args, loop_repeats, loaded=False)
    if args.load:
        with BusyLoad(args.load):
            for size in sizes:
                rows += run_size(size, presets, modes, args, loop_repeats, loaded=True)
    summarize(rows, sizes[-1], False, args.threads)
    summarize(rows, sizes[-1], True, args.threads)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        records = [asdict(r) for r in rows]
        with open(out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(records[0]))
            w.writeheader()
            w.writerows(records)
        meta = {
            "torch": torch.__version__,
            "threads": args.threads,
            "load": args.load,
            "repeats": args.repeats,
            "loop_repeats": loop_repeats,
            "rows": records,
        }
        out.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
