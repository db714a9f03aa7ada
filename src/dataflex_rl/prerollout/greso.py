"""GRESO-style probabilistic skipping of prompts that recently gave zero-variance groups."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dataflex_rl.core.base import SKIP_POLICIES, SkipPolicy
from dataflex_rl.core.batch import RolloutBatch, group_successes
from dataflex_rl.core.config import param
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.prerollout.probe import (
    ProbeSkip,
    audit_draw,
    check_control,
    controlled_threshold,
    false_skip_bound,
    pop_sampled,
)

#: the two kinds of zero-variance runs: all-correct (easy) and all-wrong (hard)
KINDS = ("easy", "hard")
#: the metric ``greso_run_threshold_*`` stands for an infinite threshold (skip nothing)
NO_SKIP_RUN = 1e6


@SKIP_POLICIES.register("greso")
@dataclass
class Greso(SkipPolicy):
    """Skip prompts whose recent groups were all-correct or all-wrong, with adaptive exploration.

    A prompt is *skippable* when its ``run`` most recent outcomes (``run >= streak``) were
    all zero-variance groups of one kind: all-correct (easy) or all-wrong (hard). It is still
    generated with probability ``p ** run`` (``compound``, the default) or ``p``, where the
    exploration probability p adapts per kind: a prompt that keeps giving no signal is
    generated less and less often, while one that gave none once is still generated with
    probability p, so forgetting and progress are seen. ``run`` is capped by the prompt
    history's ``history_size``; prompts never seen are always generated.

    After each step, p_easy falls by ``adapt_step`` when the share of all-correct groups that
    got through exceeds ``target_zero_variance / 2`` and rises otherwise (same for p_hard),
    within [``min_explore``, 1]: skipping tightens while zero-signal groups still slip
    through and relaxes when they don't.

    False-skip control (opt-in: ``max_false_skip``, the target false-skip rate; needs
    ``audit`` > 0), as ``probe``'s (docs/components/probe.md) with the run length in place of
    the prediction, per kind. ``audit``: a share of the plain batch's skipped prompts (the
    ones skipping kept from generation, not over-drawn candidates) of every draw, refill
    rounds' included, generated anyway and not trained on; alone it only measures the false-skip rate (``audit_informative /
    audit_groups``). With the control the audit sample is a uniform ``audit`` share of the
    plain batch's skippable candidates (run >= ``streak``), skipped or kept by the
    exploration draw alike (the audit's draw u < ``audit``; kept ones are generated and
    trained on as usual, at no extra cost), so it does not lean on the exploration draw. Each
    sampled candidate's (run at the decision, whether its group came back informative) enters
    the table of its kind (easy: all-correct runs, hard: all-wrong runs, whose false-skip
    rates differ a lot), the ``audit_memory`` most recent per kind. After every step each
    kind's run threshold is `controlled_threshold` of its table (floor ``streak``): the
    lowest run length t whose entries with run >= t, n of them with k informative, pass the
    one-sided Clopper-Pearson test at ``confidence``, P(Binomial(n, max_false_skip) <= k) <=
    1 - confidence; infinite (that kind skips nothing) while none passes, in particular
    before the table holds log(1 - confidence) / log(1 - max_false_skip) clean entries (29
    at 0.95 and 0.10). A candidate of a kind is then skippable only when its run reaches the
    kind's threshold, and the exploration draw (``p ** run``) still applies. The bound holds
    for one threshold fixed in advance (not for the lowest passing one among several), and
    the false-skip rate of a run length drifts as the policy learns while the table ages.
    Only the embedded engine audits: on TRL and verl the controlled greso skips nothing. As
    ``probe``'s ``revisits`` it is refused (the probe does not pass its audits on).
    ``max_false_skip: null`` (the default): no control, decisions and state as without it.

    Metrics of ``filter``: ``skipped`` (candidates not to generate, also split ``_easy`` /
    ``_hard``) and ``tokens_saved_est``, the sum over skipped prompts of the mean response
    tokens of their remembered groups (not just the last group). With the control, per kind
    (``_easy``, ``_hard``): ``greso_run_threshold`` (the run threshold in use; 1e6 stands for
    infinite: the kind skips nothing), ``greso_audit_sample`` (entries in the kind's table)
    and ``greso_false_skip_bound`` (the bound over the table's entries at or above the
    threshold in use; 1 when it skips nothing).

    Keeping the batch full is the host's job, not an option of this policy: every host draws
    rounds of ``candidate_factor`` x the missing prompts per domain until enough are kept, for
    at most ``max_draw_rounds`` rounds, then fills the rest with skipped candidates
    (`dataflex_rl.hosts.common.draw`; engine ``tasks.*``, verl and TRL ``dataflex.*``). Every
    host reports per step (`dataflex_rl.hosts.common.accounting`):
    ``skipped`` (prompts of the plain batch, the one drawn without pre-rollout, that were not
    generated), ``replacements`` (generated prompts drawn in their place),
    ``tokens_saved_est`` (over those skipped prompts), ``seconds_saved_est`` (tokens saved x
    this step's generation seconds per generated token) and ``zero_variance_through`` (share
    of generated groups whose rewards were all equal).
    """

    paper: ClassVar[str] = (
        "Zheng et al. 2025, Act Only When It Pays: Efficient RL for LLM "
        "Reasoning via Selective Rollouts (GRESO)"
    )
    streak: int = param(1, "consecutive zero-variance outcomes that make a prompt skippable", ge=1)
    explore_prob: float = param(
        0.5, "initial exploration probability p of each kind", ge=0.0, le=1.0
    )
    compound: bool = param(
        True,
        "generate a skippable prompt with probability p ** run "
        "(run: its consecutive zero-variance outcomes); false: p",
    )
    target_zero_variance: float = param(
        0.25, "share of zero-variance groups aimed for", ge=0.0, le=1.0
    )
    adapt_step: float = param(
        0.01, "change of the exploration probability per step", ge=0.0, le=1.0
    )
    min_explore: float = param(0.05, "lowest exploration probability", ge=0.0, le=1.0)
    audit: float = param(
        0.0,
        "share of the plain batch's skipped prompts generated anyway and not trained on "
        "(the false-skip audit; 0: none)",
        ge=0.0,
        le=1.0,
    )
    max_false_skip: float | None = param(
        None,
        "target false-skip rate: skip a kind only from the lowest run length whose audited "
        "false-skip rate has an upper confidence bound <= this (null: no control); needs audit > 0",
        gt=0.0,
        lt=1.0,
    )
    confidence: float = param(
        0.95, "one-sided confidence of the false-skip bound (Clopper-Pearson)", gt=0.0, lt=1.0
    )
    audit_memory: int = param(
        2048,
        "most recent audit-sample outcomes of each kind the controlled run threshold is "
        "chosen from",
        ge=1,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_control(self.max_false_skip, self.audit, "run thresholds")
        self._p = {"easy": self.explore_prob, "hard": self.explore_prob}
        self._reset_control()

    def _reset_control(self) -> None:
        # the false-skip control, per kind: the audit sample's (run at the decision,
        # informative), oldest first, and the controlled run threshold they give (inf: skip
        # nothing of that kind)
        self._audit_run = {k: torch.zeros(0, dtype=torch.float64) for k in KINDS}
        self._audit_informative = {k: torch.zeros(0, dtype=torch.bool) for k in KINDS}
        self._controlled = dict.fromkeys(KINDS, math.inf)
        # the last `filter` call (keys, [N] run, [N] kind is easy, [N] decided) until
        # `audit_mask`, and this step's sampled candidates: key -> (kind, run), until their
        # outcomes arrive
        self._round: tuple[list, Tensor, Tensor, Tensor] | None = None
        self._sampled: dict = {}

    @property
    def controlled(self) -> bool:
        """Whether the false-skip control is on (``max_false_skip`` set)."""
        return self.max_false_skip is not None

    def run_threshold(self, kind: str) -> float:
        """The run length from which a candidate of ``kind`` may be skipped: ``streak``, or with
        the control the controlled threshold (>= ``streak``; ``math.inf``: none)."""
        return self._controlled[kind] if self.controlled else float(self.streak)

    def false_skip_bound(self, kind: str) -> float:
        """The bound over the audited entries of ``kind`` at or above its run threshold in use
        (1 when none)."""
        above = self._audit_run[kind] >= self.run_threshold(kind)
        k = int((self._audit_informative[kind] & above).sum())
        return false_skip_bound(k, int(above.sum()), self.confidence)

    def runs(self, history: PromptHistory, keys: list) -> tuple[Tensor, Tensor, Tensor]:
        """Per candidate: ([N] easy run, [N] hard run, [N] mean tokens of its history).

        A run is the number of most recent consecutive zero-variance outcomes of that kind
        (at most one of the two is non-zero).
        """
        o = history.outcomes(keys)
        zero = o.zero & o.valid
        easy = (zero & (o.solve >= 1.0)).flip(1).to(torch.int64).cumprod(1).sum(1)
        hard = (zero & (o.solve <= 0.0)).flip(1).to(torch.int64).cumprod(1).sum(1)
        return easy, hard, o.mean_tokens()

    def filter(
        self,
        history: PromptHistory,
        keys: list,
        step: int,
        generator: torch.Generator | None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        n = len(keys)
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        easy_run, hard_run, mean_tokens = self.runs(history, keys)
        is_easy = easy_run >= self.streak
        is_hard = hard_run >= self.streak
        run = torch.maximum(easy_run, hard_run)
        p = torch.where(is_easy, self._p["easy"], self._p["hard"]).to(torch.float64)
        if self.compound:
            p = p ** run.to(torch.float64)
        skippable = is_easy | is_hard
        if self.controlled:
            r = run.to(torch.float64)
            skippable = (is_easy & (r >= self._controlled["easy"])) | (
                is_hard & (r >= self._controlled["hard"])
            )
            # the sample: every candidate of either kind, skipped or not
            self._round = (list(keys), run, is_easy, is_easy | is_hard)
        skip = skippable & (u >= p)
        keep = ~skip
        saved = torch.where(skip, mean_tokens, torch.zeros_like(mean_tokens)).sum()
        metrics = {
            "dataflex/prerollout/skipped": float(skip.sum()),
            "dataflex/prerollout/skipped_easy": float((skip & is_easy).sum()),
            "dataflex/prerollout/skipped_hard": float((skip & is_hard).sum()),
            "dataflex/prerollout/tokens_saved_est": float(saved),
            "dataflex/prerollout/explore_prob_easy": self._p["easy"],
            "dataflex/prerollout/explore_prob_hard": self._p["hard"],
        }
        if self.controlled:
            for kind in KINDS:
                metrics[f"dataflex/prerollout/greso_run_threshold_{kind}"] = min(
                    self._controlled[kind], NO_SKIP_RUN
                )
                metrics[f"dataflex/prerollout/greso_audit_sample_{kind}"] = float(
                    self._audit_run[kind].numel()
                )
                metrics[f"dataflex/prerollout/greso_false_skip_bound_{kind}"] = (
                    self.false_skip_bound(kind)
                )
        return keep, metrics

    def audit_mask(
        self, skip: Tensor, plain: Tensor, generator: torch.Generator | None
    ) -> Tensor | None:
        if self.audit <= 0.0:
            return None
        keys, run, easy, decided = self._round or ([], None, None, None)
        if not self.controlled or len(keys) != skip.shape[0]:
            decided = None  # no control, or not the last filter's candidates: no sample
        audited, sample = audit_draw(skip, plain, decided, self.audit, generator)
        self._sampled.update(
            (keys[j], ("easy" if bool(easy[j]) else "hard", int(run[j]))) for j in sample
        )
        self._round = None
        return audited

    def _outcomes(self, batch: RolloutBatch) -> None:
        """Sampled candidates' outcomes (run at the decision, informative) go to the table of
        their kind."""
        if not self._sampled:
            return
        keys, zero = ProbeSkip._groups(batch)
        got = {k: ([], []) for k in KINDS}
        for j, (kind, run) in zip(*pop_sampled(self._sampled, keys)):
            got[kind][0].append(float(run))
            got[kind][1].append(not bool(zero[j]))
        m = self.audit_memory
        for kind, (runs, informative) in got.items():
            if runs:
                r = torch.cat([self._audit_run[kind], torch.tensor(runs, dtype=torch.float64)])
                i = torch.cat([self._audit_informative[kind], torch.tensor(informative)])
                self._audit_run[kind], self._audit_informative[kind] = r[-m:], i[-m:]

    def observe_audit(self, batch: RolloutBatch, history: PromptHistory) -> None:
        self._outcomes(batch)

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        self._outcomes(batch)
        self._round, self._sampled = None, {}
        if self.controlled:
            for kind in KINDS:
                self._controlled[kind] = controlled_threshold(
                    self._audit_run[kind],
                    self._audit_informative[kind],
                    self.max_false_skip,
                    self.confidence,
                    floor=float(self.streak),
                )
        size = batch.group_size
        present = size > 0
        n = int(present.sum())
        if n == 0:
            return
        k = group_successes(batch)
        share = {
            "easy": float(((k == size) & present).sum()) / n,
            "hard": float(((k == 0) & present).sum()) / n,
        }
        for kind in ("easy", "hard"):
            step = (
                -self.adapt_step if share[kind] > self.target_zero_variance / 2 else self.adapt_step
            )
            self._p[kind] = min(1.0, max(self.min_explore, self._p[kind] + step))

    def state_dict(self) -> dict:
        state: dict = {"p": dict(self._p)}
        if self.controlled:
            # the control (per kind): the audit table and the controlled run threshold (inf:
            # skip nothing), a tensor: state trees hold finite JSON numbers only
            state["control"] = {
                kind: {
                    "run": self._audit_run[kind].clone(),
                    "informative": self._audit_informative[kind].clone(),
                    "threshold": torch.tensor(self._controlled[kind], dtype=torch.float64),
                }
                for kind in KINDS
            }
        return state

    def load_state_dict(self, state: dict) -> None:
        self._p = dict(state["p"])
        self._reset_control()
        for kind, c in state.get("control", {}).items():
            self._audit_run[kind] = c["run"].to(torch.float64).clone()
            self._audit_informative[kind] = c["informative"].to(torch.bool).clone()
            self._controlled[kind] = float(c["threshold"])
