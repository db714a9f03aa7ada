"""What a report says: sentences and tables from the numbers of an `Analysis`, which these
functions only word and format ("none" or "n/a", never ``inf`` or ``nan``).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from dataflex_rl.harness.reporting.document import BASELINE, Table
from dataflex_rl.harness.statistics import aggregates
from dataflex_rl.harness.statistics.analysis import (
    BETTER,
    INFERIOR,
    NO_DIFF,
    NONINFERIOR,
    TOO_FEW,
    WORSE,
    Analysis,
    Comparison,
    SummaryResult,
)
from dataflex_rl.harness.statistics.sequential import EQUIVALENT, UNDECIDED


class Fmt:
    """Formats scores: accuracies in [0, 1] (`Analysis.fractions`) are shown as points (×100)."""

    def __init__(self, scale: float, unit: str) -> None:
        self.scale, self.unit = scale, unit
        #: " (points)" after a label, "" without a unit
        self.paren = f" ({unit})" if unit else ""

    @classmethod
    def of(cls, a: Analysis) -> Fmt:
        """Points for accuracies (`Analysis.fractions`), plain numbers otherwise."""
        return cls(100.0, "points") if a.fractions else cls(1.0, "")

    def value(self, v: float, signed: bool = False) -> str:
        if not math.isfinite(v):
            return "n/a"
        digits = 1 if self.scale == 100.0 else 3
        x = round(v * self.scale, digits) + 0.0  # no "-0.0"
        return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"

    def interval(self, lo: float, hi: float, signed: bool = False) -> str:
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return "n/a"
        return f"[{self.value(lo, signed)}, {self.value(hi, signed)}]"

    def amount(self, v: float, signed: bool = False) -> str:
        """``1.2 points`` (or a plain number for other scales)."""
        return f"{self.value(v, signed)} {self.unit}".rstrip()


def delta_interval(c, fmt: Fmt, corrected: bool = False) -> str:
    """A comparison's bootstrap interval (``corrected``: at its Holm level) as text, or
    ``n/a (3 seeds)`` where its seed count allows no verdict (no interval is computed there)."""
    if not c.verdict_possible:
        return f"n/a ({c.n_pairs} seed{'s' if c.n_pairs != 1 else ''})"
    return fmt.interval(*(c.corrected_ci if corrected else c.ci), True)


def pvalue(p: float) -> str:
    if not math.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def paired_seeds(s: SummaryResult | list) -> str:
    """ "8" or "6–8": the paired-seed counts (seeds both runs have) of the real comparisons of
    a summary, or of a list of comparisons ("0" without any)."""
    ns = [c.n_pairs for c in (s if isinstance(s, list) else s.comparisons)] or [0]
    lo, hi = min(ns), max(ns)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def _mde_text(mde: float, fmt: Fmt) -> str:
    return "none (no verdict is possible)" if math.isinf(mde) else f"{fmt.amount(mde)}"


#: margin verdict -> (its words, given the margin's amount; the Holm p it rests on)
MARGIN_WORDS = {
    EQUIVALENT: ("equivalent within ±{m}", "p_equivalent_holm"),
    NONINFERIOR: ("not worse by more than {m}", "p_noninferior_holm"),
    INFERIOR: ("worse by more than {m}", "p_inferior_holm"),
    UNDECIDED: ("undecided at {m}", "p_noninferior_holm"),
}


def margin_text(c: Comparison, margin: float, fmt: Fmt) -> str:
    """A comparison's margin verdict in words with its Holm p, and where it is undecided the
    seeds a non-inferiority verdict needs: ``not worse by more than 1.0 points (p 0.016)``."""
    if c.margin_verdict not in MARGIN_WORDS:
        return c.margin_verdict
    words, p = MARGIN_WORDS[c.margin_verdict]
    out = f"{words.format(m=fmt.amount(margin))} (p {pvalue(getattr(c, p))})"
    if c.margin_verdict == UNDECIDED:
        k = c.seeds_for_margin
        out += f"; {f'about {k}' if k else 'more than 64'} paired seeds if the arms are equal"
    return out


def margin_sentences(a: Analysis, s: SummaryResult, fmt: Fmt) -> list[str]:
    """One sentence per real comparison of ``s`` at the margin (none without a margin)."""
    margin = a.options.margin
    if margin <= 0:
        return []
    out = []
    for c in s.comparisons:
        if c.margin_verdict == TOO_FEW:
            continue
        head = f"**{c.method}** against {a.baseline} on '{s.name}' at the margin ±"
        head += f"{fmt.amount(margin)}: {margin_text(c, margin, fmt)}"
        if c.margin_verdict == UNDECIDED:
            head += (
                f" (the seeds at which a non-inferiority verdict comes with probability "
                f"{a.options.power:g}, simulated at its SD of paired differences "
                f"{fmt.amount(c.sd_diff)})"
            )
        out.append(head + ".")
    return out


def headline(a: Analysis, fmt: Fmt) -> list[str]:
    """The opening paragraph: verdict counts, the largest gain against the MDE, power."""
    s = a.primary
    m = len(s.comparisons)
    counts = Counter(c.verdict for c in s.comparisons)
    where = "the average" if len(a.summaries) > 1 else f"'{s.name}'"
    out = [
        f"Against **{a.baseline}** on {where}, with {paired_seeds(s)} paired seed(s) and "
        f"Holm's correction over {m} method(s) at α = {a.options.alpha:g}: "
        f"**{counts[BETTER]} better, {counts[WORSE]} worse, {counts[NO_DIFF]} no detectable "
        "difference**"
        + (f", {counts[TOO_FEW]} with too few paired seeds." if counts[TOO_FEW] else ".")
    ]
    tested = [c for c in s.comparisons if math.isfinite(c.delta)]
    if tested:
        best = max(tested, key=lambda c: c.delta)
        worst = min(tested, key=lambda c: c.delta)
        n = min(c.n_pairs for c in s.comparisons)
        out.append(
            f"Observed differences range from {fmt.value(worst.delta, True)} "
            f"({worst.method}) to {fmt.value(best.delta, True)} ({best.method}); "
            f"the minimum detectable effect at {n} paired seeds is "
            f"{_mde_text(s.mde, fmt)} (simulated verdict rule, α = "
            f"{a.options.alpha:g}, power {a.options.power:g}, Holm over {max(1, m)}, "
            f"pooled SD of paired differences {fmt.amount(s.pooled_sd)})."
        )
    if a.options.margin > 0:
        margin = Counter(c.margin_verdict for c in s.comparisons)
        out.append(
            f"At the margin ±{fmt.amount(a.options.margin)} (one-sided sign-flip tests, Holm): "
            + ", ".join(f"**{margin[v]} {v}**" for v in MARGIN_WORDS)
            + "."
        )
    out.extend(power_sentences(a, fmt))
    return out


def power_sentences(a: Analysis, fmt: Fmt) -> list[str]:
    """What the seed count allows: the floor of the exact test and seeds needed (simulated;
    `Analysis.advice`)."""
    adv = a.advice
    if adv is None:
        return []
    out = []
    if adv.p_floor > a.options.alpha / adv.m:
        need = f"at least {adv.min_seeds} paired seeds"
        if adv.m > 1:
            need += f" for one comparison and {adv.min_seeds_family} for the best of {adv.m} "
            need += "under Holm's correction"
        out.append(
            f"With {adv.n} seeds the exact sign-flip test cannot give p below "
            f"{adv.p_floor:.3g}, so no method can be declared better or worse, whatever the "
            f"numbers: that needs {need}."
        )
    if adv.effect is not None:
        k = adv.seeds_needed
        caveat = f" (from an SD estimated on only {adv.n} seeds, itself uncertain)"
        caveat = caveat if adv.n < 5 else ""
        out.append(
            f"Detecting a {adv.effect * fmt.scale:g}-point difference with power "
            f"{a.options.power:g} among {adv.m} comparison(s) would take "
            + (f"about {k} paired seeds" if k else "more than 64 paired seeds")
            + f" (simulated verdict rule){caveat}."
        )
    return out


def sensitivity_lines(a: Analysis, fmt: Fmt) -> list[str]:
    """How sensitive the instrument was in this experiment (before any ranking): noise, MDE
    at this seed count, the controls' outcomes, the pairing correlation."""
    s = a.primary
    n = min((c.n_pairs for c in s.comparisons), default=0)
    m = max(1, len(s.comparisons))
    out = [
        f"paired seeds: {paired_seeds(s)} (seeds with both the baseline's and the method's "
        f"run) on '{s.name}'",
        f"noise: pooled SD of paired differences {fmt.amount(s.pooled_sd)}"
        + "".join(
            f"; {c.method} (control) {fmt.amount(c.sd_diff)}"
            for c in s.controls
            if c.control == "same" and math.isfinite(c.sd_diff)
        ),
        f"minimum detectable effect at {n} paired seeds, Holm over {m}: "
        f"{_mde_text(s.mde, fmt)} (power {a.options.power:g}, simulated with "
        "the exact verdict rule; `dataflex_rl.harness.statistics.power`)",
    ]
    corr = [c for c in s.comparisons + s.controls if math.isfinite(c.corr)]
    if corr:
        weak = ", ".join(c.method for c in corr if c.corr < 0.3)
        line = "pairing correlation (Pearson, method vs baseline across seeds): "
        line += ", ".join(f"{c.method} {c.corr:+.2f}" for c in corr)
        if weak:
            line += f" — near 0 or negative for {weak}: pairing by seed removes little noise "
            line += "there (or the seeds barely differ)"
        out.append(line)
    for c in s.controls:
        want = "no detectable difference" if c.control == "same" else "worse"
        state = c.control_status
        state = f"**{state}**" if c.control_passed is not None else state
        out.append(
            f"control {c.method} (must be {want}): {c.verdict}, "
            f"{fmt.amount(c.delta, signed=True)}, p = {pvalue(c.p_holm)} (tested on "
            f"its own) — {state}"
        )
    if not s.controls:
        out.append(
            "no control arms: the report cannot show that this instrument finds a "
            "planted harm or stays quiet on an A/A copy"
        )
    return out


def verdict_sentences(a: Analysis, s: SummaryResult, fmt: Fmt) -> list[str]:
    """One sentence per method of summary ``s`` with a detectable difference, or whose plain
    95% interval excludes zero while the corrected test does not."""
    out = []
    blocked = [c for c in s.comparisons if not c.verdict_possible and c.n_pairs >= 2]
    if blocked:
        names = ", ".join(c.method for c in blocked)
        floor = min(c.p_holm_floor for c in blocked)
        out.append(
            f"No verdict is possible for {names} on '{s.name}': with "
            f"{paired_seeds(blocked)} paired seeds the exact sign-flip test, Holm over "
            f"{len(s.comparisons)}, cannot give an adjusted p below {floor:.3g} > α = "
            f"{a.options.alpha:g}, whatever the scores; intervals are not shown (a bootstrap "
            "over so few seeds is too narrow to read)."
        )
    for c in s.comparisons:
        if c.verdict in (BETTER, WORSE):
            out.append(
                f"**{c.method}** is {c.verdict} than {a.baseline} on '{s.name}': "
                f"{fmt.amount(c.delta, signed=True)} (corrected "
                f"{100 * (1 - c.level):.1f}% interval "
                f"{delta_interval(c, fmt, corrected=True)}, Holm p = "
                f"{pvalue(c.p_holm)})."
            )
        elif c.verdict == NO_DIFF and c.verdict_possible and (c.ci[0] > 0 or c.ci[1] < 0):
            out.append(
                f"{c.method} on '{s.name}': the uncorrected 95% bootstrap interval "
                f"{fmt.interval(*c.ci, signed=True)} excludes zero, but the "
                f"corrected test does not (Holm p = {pvalue(c.p_holm)}, corrected "
                f"interval {fmt.interval(*c.corrected_ci, signed=True)}): not a "
                "detectable difference."
            )
    if not out:
        out.append(f"No method differs detectably from {a.baseline} on '{s.name}'.")
    return out + margin_sentences(a, s, fmt)


def sign_changes(a: Analysis) -> list[str]:
    """Methods detectably better under one summary and worse under another."""
    out = []
    for method in a.methods[1:]:
        verdicts = {
            s.name: next(c.verdict for c in s.comparisons if c.method == method)
            for s in a.summaries
        }
        kinds = {v for v in verdicts.values() if v in (BETTER, WORSE)}
        if len(kinds) == 2:
            parts = ", ".join(f"{v} on '{k}'" for k, v in verdicts.items() if v in kinds)
            out.append(f"{method} is {parts}: the summary used decides the sign.")
    return out


def ranking_sentences(a: Analysis) -> list[str]:
    """Which method leads under each summary, and Kendall's tau against the average."""
    if len(a.summaries) < 2 or len(a.methods) < 2:
        return []
    best = {
        s.name: max(s.methods, key=lambda m: m.mean if math.isfinite(m.mean) else -1e300)
        for s in a.summaries
    }
    avg = a.primary.name
    out = [
        f"The highest mean on '{avg}' is {best[avg].method}; per summary: "
        + ", ".join(f"{k} → {v.method}" for k, v in best.items() if k != avg)
        + "."
    ]
    k = len(a.summaries) - 1
    taus = [(s.name, a.tau[i, k]) for i, s in enumerate(a.summaries[:-1])]
    out.append(
        "Kendall's tau between each summary's ranking and the average ranking "
        "(1 = same order, 0 = unrelated, -1 = reversed): "
        + ", ".join(f"{n} {t:.2f}" if math.isfinite(t) else f"{n} n/a" for n, t in taus)
        + "."
    )
    low = ", ".join(n for n, t in taus if math.isfinite(t) and t < 0.5)
    if low:
        out.append(
            f"The ranking changes substantially (tau < 0.5) on: {low}; a method's place "
            "depends on the summary chosen."
        )
    return out


def summary_table(s: SummaryResult, fmt: Fmt, margin: float = 0.0) -> Table:
    """Per method of ``s`` (controls last): mean, paired Δ, intervals, p, MDE, r, verdict, and
    with a ``margin`` the margin verdict (`margin_text`)."""
    unit = fmt.paren
    header = ("method", "n", f"mean{unit} [95% CI]", f"Δ{unit} [95% CI]", "corrected CI (level)")
    header += ("p", "p (Holm)", "MDE", "r", "verdict")
    header += (f"at ±{fmt.amount(margin)}",) if margin > 0 else ()
    blank = ("",) if margin > 0 else ()
    comps = {c.method: c for c in s.comparisons + s.controls}
    rows, verdicts = [], []
    for m in s.methods + s.control_methods:
        head = (m.method, str(m.n), f"{fmt.value(m.mean)} {fmt.interval(m.low, m.high)}")
        c = comps.get(m.method)
        if c is None:
            rows.append((*head, "(baseline)", "", "", "", "", "", "", *blank))
            verdicts.append(BASELINE)
            continue
        level = f" ({100 * (1 - c.level):.1f}%)" if math.isfinite(c.level) else ""
        level = level if c.verdict_possible else ""
        rows.append(
            (
                *head,
                f"{fmt.value(c.delta, True)} {delta_interval(c, fmt)}",
                f"{delta_interval(c, fmt, corrected=True)}{level}",
                pvalue(c.p),
                pvalue(c.p_holm),
                "none" if math.isinf(c.mde) else fmt.value(c.mde),
                f"{c.corr:+.2f}" if math.isfinite(c.corr) else "n/a",
                f"{c.verdict}; control ({c.control}): {c.control_status}"
                if c.control
                else c.verdict,
                *((margin_text(c, margin, fmt),) if margin > 0 else ()),
            )
        )
        verdicts.append(c.verdict)
    numeric = (False, True, False, False, False, True, True, True, True, False)
    numeric += (False,) * len(blank)
    return Table(header, tuple(rows), numeric, tuple(verdicts))


def aggregate_table(aggs: list[aggregates.MethodAggregate], baseline: str, fmt: Fmt) -> Table:
    """IQM and probability of improvement per method (`Analysis.aggregates`)."""
    unit = fmt.paren
    rows = tuple(
        (
            g.method,
            f"{g.runs} × {g.tasks}",
            f"{fmt.value(g.iqm)} {fmt.interval(*g.iqm_ci)}",
            "—"
            if g.method == baseline
            else f"{_num(g.poi)} [{_num(g.poi_ci[0])}, {_num(g.poi_ci[1])}]",
        )
        for g in aggs
    )
    header = ("method", "runs × benchmarks", f"IQM{unit} [95% CI]", f"P(> {baseline}) [95% CI]")
    return Table(header, rows, (False, True, False, False))


def _num(v: float) -> str:
    return f"{v:.2f}" if math.isfinite(v) else "n/a"


def ranking_table(a: Analysis) -> Table:
    """Each method's rank by mean under every summary (`Analysis.ranks`)."""
    names = [s.name for s in a.summaries]
    table = dict(zip(names, a.ranks))
    rows = tuple(
        (m, *(f"{table[n][i]:.0f}" if math.isfinite(table[n][i]) else "n/a" for n in names))
        for i, m in enumerate(a.methods)
    )
    return Table(("method", *names), rows, (False, *(True,) * len(names)))


def tau_table(a: Analysis) -> Table:
    """Kendall's tau-b between every two summaries' rankings."""
    names = [s.name for s in a.summaries]
    rows = tuple((n, *(_num(t) for t in np.asarray(a.tau)[i])) for i, n in enumerate(names))
    return Table(("", *names), rows, (False, *(True,) * len(names)))


def scores_table(a: Analysis, fmt: Fmt) -> Table:
    """The comparison on the average, decision metric first (what ``compare`` and ``report``
    print): per method the compared metric's means per domain and on the average, Δ, the
    corrected interval ("n/a (N seeds)" where no verdict is possible), p (Holm) and the
    verdict; then the other accuracy the engine measured (`Analysis.beside`), labelled."""
    s = a.primary
    cols = [*a.parts, s.name]
    unit = f", {fmt.unit}" if fmt.unit else ""
    label = "score" if a.compared == "score" else f"{a.compared} accuracy"
    main = {x.name: {m.method: m.mean for m in x.methods + x.control_methods} for x in a.summaries}
    beside = a.extra_means[a.beside] if a.beside else {}
    comps = {c.method: c for c in s.comparisons + s.controls}
    margin = a.options.margin
    rows = []
    for m in s.methods + s.control_methods:
        cells = [m.method, *(fmt.value(main[c].get(m.method, math.nan)) for c in cols)]
        c = comps.get(m.method)
        if c is None:
            cells += ["(baseline)", "", "", ""]
        else:
            verdict = c.verdict
            if c.control:
                verdict += f" [control, must be {c.control}: {c.control_status}]"
            p = f"{c.p_holm:.3f}" if math.isfinite(c.p_holm) else "n/a"
            cells += [fmt.value(c.delta, True), delta_interval(c, fmt, True), p, verdict]
        if margin > 0:
            cells.append("" if c is None or c.control else margin_text(c, margin, fmt))
        cells += [fmt.value(beside.get(x, {}).get(m.method, math.nan)) for x in cols if beside]
        rows.append(tuple(cells))
    header = ("method", *cols, "Δ", "corrected CI", "p (Holm)", "verdict")
    header += (f"at ±{fmt.amount(margin)}",) if margin > 0 else ()
    groups = [("", 1), (f"{label} (compared{unit})", len(header) - 1)]
    if beside:
        header += tuple(cols)
        groups.append((f"{a.beside} accuracy{unit}", len(cols)))
    numeric = tuple(h not in ("method", "corrected CI", "verdict") for h in header)
    numeric = tuple(n and not h.startswith("at ±") for n, h in zip(numeric, header))
    return Table(header, tuple(rows), numeric, groups=tuple(groups))
