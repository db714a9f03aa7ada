"""A gate for CI (``dataflex-rl gate``, `frame.Report.gate`): pass, fail or inconclusive from
stored analyses, one line for a log and a JSON verdict for bots (docs/analysis.md, "A gate").

``require="better"`` passes a method called better, fails one called worse; ``"non-inferior"``
passes one not worse than the baseline by more than the margin (equivalent included), fails
one worse by more than it. Anything else is inconclusive, with the paired seeds that would
decide it: for "better" those that detect the observed Δ with the analysis' power (simulated
verdict rule), for "non-inferior" `analysis.Comparison.seeds_for_margin`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.harness.reporting.narrative import MARGIN_WORDS, Fmt, margin_text, pvalue
from dataflex_rl.harness.statistics import power
from dataflex_rl.harness.statistics.analysis import (
    BETTER,
    INFERIOR,
    NONINFERIOR,
    WORSE,
    Analysis,
    Comparison,
    SummaryResult,
)
from dataflex_rl.harness.statistics.sequential import EQUIVALENT

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
#: exit status of each outcome (2 is the command line's one-line error)
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
#: what a method must show -> (margin verdicts or verdicts that pass, those that fail)
REQUIREMENTS = {
    "better": ((BETTER,), (WORSE,)),
    "non-inferior": ((NONINFERIOR, EQUIVALENT), (INFERIOR,)),
}


@dataclass(frozen=True)
class GateCheck:
    """One gated comparison: where (``stratum``, ``summary``), which, its outcome, the verdict
    it rests on with its Holm p, and the paired seeds that would decide it (inconclusive only;
    None: more than 64, or none can since Δ ≤ 0 for "better")."""

    stratum: str
    summary: str
    method: str
    baseline: str
    outcome: str
    verdict: str
    delta: float
    p_holm: float
    n_pairs: int
    seeds_needed: int | None
    #: the verdict in words (`narrative.margin_text` at a margin)
    text: str


@dataclass(frozen=True)
class GateResult:
    """Every check of a gate; ``outcome``: fail if any fails, else inconclusive if any is,
    else pass."""

    require: str
    margin: float
    alpha: float
    checks: tuple[GateCheck, ...]
    #: the margin in words ("1.0 points": `narrative.Fmt` of the first analysis)
    margin_text: str = ""

    @property
    def outcome(self) -> str:
        found = {c.outcome for c in self.checks}
        return next(o for o in (FAIL, INCONCLUSIVE, PASS) if o in found or o == PASS)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def lines(self) -> list[str]:
        """One line per check, then the summary line (what a CI log shows last)."""
        out = [
            f"{c.outcome.upper():<12} {c.method} vs {c.baseline} on '{c.summary}'"
            + (f" [{c.stratum}]" if c.stratum else "")
            + f": {c.text}; {c.n_pairs} paired seeds"
            for c in self.checks
        ]
        return [*out, self.summary_line()]

    def summary_line(self) -> str:
        counts = {o: sum(c.outcome == o for c in self.checks) for o in EXIT_CODES}
        what = "better"
        if self.require != "better":
            what = f"not worse by more than {self.margin_text or self.margin}"
        line = (
            f"gate {self.outcome.upper()}: {counts[PASS]} of {len(self.checks)} comparison(s) "
            f"{what} (alpha {self.alpha:g})"
        )
        if counts[FAIL]:
            line += f"; {counts[FAIL]} fail"
        if counts[INCONCLUSIVE]:
            need = [c.seeds_needed for c in self.checks if c.outcome == INCONCLUSIVE]
            most = "more than 64" if None in need else f"about {max(need)}"
            line += f"; {counts[INCONCLUSIVE]} inconclusive, {most} paired seeds needed"
            line += " (to detect the observed Δ)" if self.require == "better" else ""
            line += " (if the arms are equal)" if self.require != "better" else ""
        return line

    def as_json(self) -> dict:
        """The verdict for bots: outcome, exit code, settings and every check (NaN as null)."""
        checks = [
            {
                k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(c).items()
            }
            for c in self.checks
        ]
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "require": self.require,
            "margin": self.margin,
            "alpha": self.alpha,
            "summary": self.summary_line(),
            "checks": checks,
        }


def gate(
    analyses: list[tuple[str, Analysis]],
    require: str = "better",
    methods: tuple[str, ...] | list[str] = (),
    summary: str | None = None,
) -> GateResult:
    """Gate the comparisons of ``analyses`` ((stratum label, analysis) each; "" for the only
    one) on ``summary`` (default each analysis' primary, the average): the ``methods`` given
    (default every real method). ConfigError on an unknown requirement, method or summary,
    or "non-inferior" without a margin."""
    if require not in REQUIREMENTS:
        raise ConfigError(f"--require {require!r}: expected one of {', '.join(REQUIREMENTS)}")
    if not analyses:
        raise ConfigError("gate: no comparison (no stratum has its baseline and another method)")
    options = analyses[0][1].options
    if require == "non-inferior" and options.margin <= 0:
        raise ConfigError(
            "--require non-inferior needs --margin M (score units: 0.01 is 1 point of accuracy)"
        )
    _check_names(analyses, methods, summary)
    chosen = [(label, a, a.summary(summary) if summary else a.primary) for label, a in analyses]
    checks = [
        _check(label, a, s, c, require)
        for label, a, s in chosen
        for c in s.comparisons
        if not methods or c.method in methods
    ]
    words = Fmt.of(analyses[0][1]).amount(options.margin)
    return GateResult(require, options.margin, options.alpha, tuple(checks), words)


def _check(label: str, a: Analysis, s: SummaryResult, c: Comparison, require: str) -> GateCheck:
    passing, failing = REQUIREMENTS[require]
    fmt = Fmt.of(a)
    if require == "better":
        verdict, p_holm = c.verdict, c.p_holm
        text = f"{c.verdict}, Δ {fmt.amount(c.delta, signed=True)} (p {pvalue(c.p_holm)})"
    else:
        verdict = c.margin_verdict
        p_holm = getattr(c, MARGIN_WORDS.get(verdict, ("", "p_noninferior_holm"))[1])
        text = margin_text(c, a.options.margin, fmt) + f", Δ {fmt.amount(c.delta, signed=True)}"
    outcome = PASS if verdict in passing else FAIL if verdict in failing else INCONCLUSIVE
    need = None
    if outcome == INCONCLUSIVE and require == "better":
        o = a.options
        m = len(s.comparisons)
        need = power.simulated_seeds_needed(c.sd_diff, c.delta, m=m, alpha=o.alpha, power=o.power)
        if c.delta <= 0:
            text += "; Δ ≤ 0: more seeds would not make it better"
        else:
            text += f"; {f'about {need}' if need else 'more than 64'} paired seeds to detect Δ"
    elif outcome == INCONCLUSIVE:
        need = c.seeds_for_margin
    return GateCheck(
        label,
        s.name,
        c.method,
        a.baseline,
        outcome,
        verdict,
        c.delta,
        p_holm,
        c.n_pairs,
        need,
        text,
    )


def _check_names(analyses, methods, summary) -> None:
    known = list(dict.fromkeys(m for _, a in analyses for m in a.methods[1:]))
    for m in methods:
        if m not in known:
            raise ConfigError(
                f"--method {m}: not a compared method.{suggest(m, known)} Methods: "
                f"{', '.join(known)}"
            )
    names = list(dict.fromkeys(s.name for _, a in analyses for s in a.summaries))
    if summary is not None and summary not in names:
        raise ConfigError(
            f"--summary {summary}: not a summary.{suggest(summary, names)} Summaries: "
            f"{', '.join(names)}"
        )
    if summary is not None:
        missing = [label for label, a in analyses if summary not in [s.name for s in a.summaries]]
        if missing:
            raise ConfigError(f"--summary {summary}: not a summary of {', '.join(missing)}")
