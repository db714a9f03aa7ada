"""``compare --until-decided``: add seeds in rounds until every comparison is decided.

Round 1 runs the experiment's seeds, each later one ``round_size`` new seeds for the baseline,
the undecided comparisons and the controls, judged by `statistics.sequential`; stops when all
are decided or at ``max_seeds`` (docs/harness.md, "Deciding with as few seeds as needed").
The report is rewritten each round; ``sequential.json`` holds the rounds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataflex_rl.core.io import atomic_write_json, atomic_write_text
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting.document import Paragraph, Section, Table, markdown_section
from dataflex_rl.harness.reporting.report import write_pages
from dataflex_rl.harness.running.compare import CompareResult, run_compare
from dataflex_rl.harness.running.executors import make_executor
from dataflex_rl.harness.running.experiment import Experiment
from dataflex_rl.harness.running.runner import locked_output
from dataflex_rl.harness.statistics.analysis import score_matrices
from dataflex_rl.harness.statistics.power import simulated_seeds_needed
from dataflex_rl.harness.statistics.results import Row
from dataflex_rl.harness.statistics.sequential import sequential_verdicts

UNDECIDED = "undecided"
#: ``rule(diffs, alpha=, margin=, bound=)`` -> {label: result with verdict, n, low, high}
Rule = Callable[..., Mapping[str, Any]]


@dataclass
class Round:
    """One round: the seeds so far and every comparison's verdict after it."""

    index: int
    seeds: list[int]
    verdicts: dict[str, dict]


@dataclass
class Sequential:
    """What the loop did."""

    rounds: list[Round] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    stopped: str = ""
    max_seeds: int = 0
    round_size: int = 0
    margin: float = 0.0
    alpha: float = 0.05
    fixed_n: int | None = None
    pooled_sd: float = math.nan
    #: comparison -> the round it was decided at (it ran no later seeds)
    decided_at: dict[str, int] = field(default_factory=dict)
    #: label -> the seeds it ran (the baseline and the controls: every seed)
    seeds_of: dict[str, list[int]] = field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        return self.rounds[-1].seeds if self.rounds else []

    @property
    def runs_used(self) -> int:
        return sum(len(s) for s in self.seeds_of.values())

    @property
    def runs_all_arms(self) -> int:
        """Runs of the same loop had every round run every arm (same stop, same verdicts up
        to an equivalence refined within the margin)."""
        return len(self.seeds_of) * len(self.seeds)

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "seeds_used": len(self.seeds),
            "seeds_saved": None if self.fixed_n is None else self.fixed_n - len(self.seeds),
            "runs_used": self.runs_used,
            "runs_all_arms": self.runs_all_arms,
        }


def next_seeds(used: list[int], k: int) -> list[int]:
    """The ``k`` smallest integers >= 0 not in ``used``."""
    taken, out, s = set(used), [], 0
    while len(out) < k:
        if s not in taken:
            out.append(s)
        s += 1
    return out


def paired_differences(
    rows: list[Row], baseline: str, labels: list[str], seed_order: list[int]
) -> dict[str, np.ndarray]:
    """label -> [n] method − baseline on the primary summary, in ``seed_order``, over the seeds
    both finished (labels without any finished run get an empty array)."""
    out = {label: np.zeros(0) for label in labels}
    if not rows:
        return out
    methods, seeds, matrices, _ = score_matrices(rows)
    average = matrices["average"][1]
    cols = [seeds.index(str(s)) for s in seed_order if str(s) in seeds]
    if baseline not in methods:
        return out
    base = average[methods.index(baseline), cols]
    for label in labels:
        if label in methods:
            d = average[methods.index(label), cols] - base
            out[label] = d[np.isfinite(d)]
    return out


def _verdicts(
    rule: Rule, diffs: dict[str, np.ndarray], alpha: float, margin: float
) -> dict[str, dict]:
    if not diffs:
        return {}
    res = rule(diffs, alpha=alpha, margin=margin, bound=1.0)
    return {
        k: {"verdict": str(r.verdict), "n": int(r.n), "low": float(r.low), "high": float(r.high)}
        for k, r in res.items()
    }


@locked_output
def run_until_decided(
    exp: Experiment,
    out_dir: str | Path,
    *,
    max_seeds: int,
    round_size: int = 2,
    margin: float = 0.02,
    workers: int | None = None,
    progress: bool = True,
    plots: bool = True,
    train_fn: str | None = None,
    rule: Rule | None = None,
    echo: Callable[[str], None] = print,
    address: str | None = None,
) -> tuple[CompareResult, Sequential]:
    """Run the experiment in rounds of seeds until every comparison is decided; ``margin`` in
    the score's units, other arguments as `run_compare`. ConfigError on bad sizes."""
    if round_size < 1:
        raise ConfigError(f"--round: must be >= 1, got {round_size}")
    if not margin > 0:
        raise ConfigError(f"--margin: must be > 0, got {margin}")
    if max_seeds < len(exp.seeds):
        raise ConfigError(f"--max-seeds {max_seeds}: below the experiment's {len(exp.seeds)} seeds")
    rule = rule or sequential_verdicts
    controls = list(exp.control_outcomes)
    comparisons = [x for x in exp.labels if x != exp.baseline and x not in controls]
    if not comparisons:
        comparisons, controls = controls, []
    seq = Sequential([], comparisons, controls, "", max_seeds, round_size, margin)
    seq.alpha, seq.seeds_of = exp.statistics.alpha, {label: [] for label in exp.labels}
    exp.host_impl.check(exp)  # its settings, Python and data, before any run starts
    with make_executor(exp.executor, exp.resources, workers=workers, address=address) as ex:
        run = {"progress": progress, "plots": plots, "train_fn": train_fn, "executor": ex}
        res, diffs = _rounds(exp, out_dir, seq, rule, echo, run)
    _fixed_design(seq, diffs, exp)
    write_sequential(seq, res)
    return res, seq


def _rounds(
    exp: Experiment, out_dir: str | Path, seq: Sequential, rule: Rule, echo: Callable, run: dict
) -> tuple[CompareResult, dict[str, np.ndarray]]:
    """The rounds of `run_until_decided`, filling ``seq`` (``run``: `run_compare`'s options, an
    entered executor among them): the last round's result and paired differences."""
    comparisons, controls, alpha, margin = seq.comparisons, seq.controls, seq.alpha, seq.margin
    seeds, new = list(exp.seeds), list(exp.seeds)
    frozen: dict[str, dict] = {}  # the verdicts of decided comparisons, as decided
    while True:
        for label, ran in seq.seeds_of.items():
            if label not in seq.decided_at:
                ran += new
        cells = {(label, s) for label, ran in seq.seeds_of.items() for s in ran}
        current = dataclasses.replace(exp, seeds=tuple(seeds))
        res = run_compare(current, out_dir, cells=cells, **run)
        diffs = paired_differences(res.rows, exp.baseline, comparisons + controls, seeds)
        verdicts = _verdicts(rule, {k: diffs[k] for k in comparisons}, alpha, margin)
        verdicts.update(frozen)
        verdicts.update(_verdicts(rule, {k: diffs[k] for k in controls}, alpha, margin))
        seq.rounds.append(Round(len(seq.rounds) + 1, list(seeds), verdicts))
        for k in comparisons:
            if k not in frozen and verdicts[k]["verdict"] != UNDECIDED:
                frozen[k], seq.decided_at[k] = verdicts[k], seq.rounds[-1].index
        echo(round_line(seq.rounds[-1], comparisons, controls, seq.decided_at))
        if len(frozen) == len(comparisons):
            seq.stopped = "every comparison decided"
            return res, diffs
        if len(seeds) >= seq.max_seeds:
            seq.stopped = f"--max-seeds {seq.max_seeds} reached"
            return res, diffs
        new = next_seeds(seeds, min(seq.round_size, seq.max_seeds - len(seeds)))
        seeds += new


def round_line(
    r: Round, comparisons: list[str], controls: list[str], decided_at: dict[str, int] | None = None
) -> str:
    """``round 2, 4 seeds: difffilter undecided (n=4); controls: aa_control undecided (n=4)``;
    a comparison decided at an earlier round says so (``better (n=4, stopped at round 2)``)."""
    decided_at = decided_at or {}

    def one(k: str) -> str:
        v, at = r.verdicts[k], decided_at.get(k, r.index)
        stop = f", stopped at round {at}" if at < r.index else ""
        return f"{k} {v['verdict']} (n={v['n']}{stop})"

    def part(labels: list[str]) -> str:
        return ", ".join(map(one, labels))

    line = f"round {r.index}, {len(r.seeds)} seeds: {part(comparisons)}"
    return line + (f"; controls: {part(controls)}" if controls else "")


def _fixed_design(seq: Sequential, diffs: dict[str, np.ndarray], exp: Experiment) -> None:
    sds = [float(np.std(diffs[k], ddof=1)) for k in seq.comparisons if diffs[k].size > 1]
    sds = [s for s in sds if s > 0]
    if not sds:
        return
    seq.pooled_sd = math.sqrt(sum(s * s for s in sds) / len(sds))
    m, power = len(seq.comparisons), exp.statistics.power
    seq.fixed_n = simulated_seeds_needed(
        seq.pooled_sd, seq.margin, m=m, alpha=seq.alpha, power=power
    )


def section(seq: Sequential) -> Section:
    """The loop's section of the report (report.md and report.html): one row per round, a
    column per comparison and control (its verdict and anytime-valid interval in points; a
    comparison decided earlier reads "stopped at round r"), then what stopping saved."""
    pts = 100.0
    labels = seq.comparisons + seq.controls
    rows = []
    for r in seq.rounds:
        cells = []
        for k in labels:
            v = r.verdicts.get(k)
            if v is None:
                cells.append("—")
            elif seq.decided_at.get(k, r.index) < r.index:
                cells.append(f"{v['verdict']}, stopped at round {seq.decided_at[k]}")
            else:
                cells.append(f"{v['verdict']} [{v['low'] * pts:+.1f}, {v['high'] * pts:+.1f}]")
        rows.append((str(r.index), str(len(r.seeds)), *cells))
    table = Table(("round", "seeds", *labels), tuple(rows), (True, True, *(False,) * len(labels)))
    lead = (
        f"Seeds were added in rounds of {seq.round_size} (at most {seq.max_seeds}) until "
        f"every comparison was decided by the anytime-valid rule at α = {seq.alpha:g}: "
        f"better, worse, or equivalent within ±{seq.margin * pts:g} points.",
        "Controls run on the same seeds but do not keep the loop going; they form their own "
        "family.",
    )
    blocks = (Paragraph(" ".join(lead)), table, Paragraph(" ".join(_notes(seq))))
    return Section("sequential", "Sequential comparison (--until-decided)", blocks)


def _notes(seq: Sequential) -> tuple[str, ...]:
    """The sentences under the rounds' table: the stop, who stopped when, runs and seeds
    saved."""
    pts = 100.0
    used = len(seq.seeds)
    lines = [f"Stopped: {seq.stopped}, after {used} seeds ({', '.join(map(str, seq.seeds))})."]
    if seq.decided_at:
        lines.append(
            "Decided, then given no more seeds: "
            + ", ".join(
                f"{k} at round {r} ({len(seq.seeds_of.get(k, []))} seeds)"
                for k, r in seq.decided_at.items()
            )
            + "."
        )
    if seq.seeds_of:
        saved = seq.runs_all_arms - seq.runs_used
        lines.append(
            f"Runs: {seq.runs_used}, against {seq.runs_all_arms} had every round run every arm: "
            f"{saved} saved."
        )
    if seq.fixed_n is not None:
        saved = seq.fixed_n - used
        lines.append(
            f"A fixed-n design detecting a {seq.margin * pts:g}-point difference with power "
            f"at the pooled SD of the paired differences ({seq.pooled_sd * pts:.2f} points, "
            f"{len(seq.comparisons)} comparison(s)) needs {seq.fixed_n} seeds: "
            + (f"{saved} seed(s) saved." if saved >= 0 else f"{-saved} seed(s) more were used.")
        )
    elif not math.isnan(seq.pooled_sd):
        lines.append(
            f"A fixed-n design for a {seq.margin * pts:g}-point difference at the "
            f"pooled SD ({seq.pooled_sd * pts:.2f} points) needs more than 64 seeds "
            "(or could not be computed)."
        )
    else:
        lines.append(
            "No fixed-n comparison: the paired differences have no spread yet (fewer than "
            "two, or all equal)."
        )
    return (
        *lines,
        "Intervals: the rule's anytime-valid interval of the mean difference, in points, at "
        "each round.",
    )


def write_sequential(seq: Sequential, res: CompareResult) -> None:
    """``sequential.json``, and the loop's `section` in report.md and report.html (both
    rewritten from the last round's report; appended to report.md when it has no
    statistics)."""
    out = Path(res.out_dir)
    atomic_write_json(out / "sequential.json", seq.to_dict())
    sec = section(seq)
    if res.report is not None:
        inputs = dataclasses.replace(res.report.inputs, sections=[*res.report.inputs.sections, sec])
        write_pages(dataclasses.replace(res.report, inputs=inputs))
        return
    report = out / "report.md"
    text = report.read_text() if report.is_file() else ""
    atomic_write_text(
        report, text.rstrip("\n") + "\n\n" + "\n".join(markdown_section(sec, out)) + "\n"
    )
