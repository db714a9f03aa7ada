"""`Strategy`: the composition of select / tokens / reweight / mix / prerollout, one decision
per step (the order within a step: docs/architecture.md; the `Decision`: docs/concepts.md).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dataflex_rl.core.advantages import grpo_advantages_per_response
from dataflex_rl.core.base import Mixer, Scorer, check_score_shape, checked_scores
from dataflex_rl.core.batch import TOKEN_FIELDS, RolloutBatch, informative_mask, token_mask
from dataflex_rl.core.component import Component
from dataflex_rl.core.history import Outcomes, PromptHistory
from dataflex_rl.core.metrics import check_domain_names, step_metrics
from dataflex_rl.core.proportions import apply_floor, normalize_proportions
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rollouts import ResponseBudget, allocate_counts
from dataflex_rl.core.rowops import masked_row_sums, row_chunks
from dataflex_rl.core.spec import (
    MechanismSpec,
    RolloutsSpec,
    StrategySpec,
    history_size,
    parse_strategy,
    resolve_mechanism,
    resolved_option,
)

#: advantage estimators that normalize rewards within prompt groups (verl names)
GROUP_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_vectorized",
        "rloo",
        "rloo_vectorized",
        "grpo_passk",
        "opo",
        "gpg",
        "reinforce_plus_plus_baseline",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
        "gdpo",
    }
)
#: advantage estimators with no group structure
NON_GROUP_ESTIMATORS = frozenset({"gae", "reinforce_plus_plus", "remax"})


class StrategyWarning(UserWarning):
    """Something unusual but defined happened in a step (e.g. every response was dropped)."""


def _due(step: int, warmup: int, every: int) -> bool:
    return step >= warmup and (step - warmup) % every == 0


def broadcast_scores(scores: Tensor, granularity: str, batch: RolloutBatch) -> Tensor:
    """Group scores [G] -> response scores [B]; other levels unchanged."""
    return scores.index_select(0, batch.group_ids) if granularity == "group" else scores


@dataclass(eq=False)
class Decision:
    """What a strategy decided for one batch (see docs/concepts.md#the-decision); held per
    response, its [B, T] views are built on first access and cached.

    The loss is `aggregate`: the per-token loss times `weights_per_token`, summed over
    `denominator_mask` and divided by its token count. A host that computes its own loss
    reads those two (or, removing whole rows, `loss_rows`); nothing else shapes it.

    Attributes:
        keep_mask: [B] bool, responses that take part in the update.
        weights_per_response: [B] float32, mean weight over each row's tokens in the loss;
            0 for dropped, padding and invalid rows and for rows without tokens.
        response_mask: [B, T] bool, the batch's valid tokens (not copied).
        advantages_per_response: [B] recomputed advantages, or None to keep the host's.
        proportions: [D] domain proportions for the next batches when an update was due.
        metrics: ``dataflex/...`` scalars.
        token_weights: [B, T] a token-level reweighter's raw weights (None: each row's
            ``weights_per_response``); a kept token of row i weighs ``token_weights *
            token_scale[i] + token_offset[i]``.
        token_scale, token_offset: [B] the normalization of ``token_weights`` (None: 1 and 0).
        token_keep_mask: [B, T] bool, the tokens ``tokens`` kept (None: every valid token of
            a kept row).
        denominator: what the loss is averaged over, as the strategy set it (hosts read
            `denominator_mask`): None, every valid token (dropped rows and tokens count with
            weight 0); [B] bool, the valid tokens of these rows (``select.renormalize``: the
            rows ``select`` kept); [B, T] bool, these valid tokens (``tokens.renormalize``:
            the kept tokens).
    """

    keep_mask: Tensor
    weights_per_response: Tensor
    response_mask: Tensor = field(repr=False)
    advantages_per_response: Tensor | None = None
    proportions: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    token_weights: Tensor | None = field(default=None, repr=False)
    token_scale: Tensor | None = field(default=None, repr=False)
    token_offset: Tensor | None = field(default=None, repr=False)
    token_keep_mask: Tensor | None = field(default=None, repr=False)
    denominator: Tensor | None = field(default=None, repr=False)

    @property
    def per_token(self) -> bool:
        """Whether the weights differ within a row (apply ``weights_per_token``)."""
        return self.token_weights is not None or self.token_keep_mask is not None

    @cached_property
    def loss_mask(self) -> Tensor:
        """[B, T] bool, valid (kept) tokens of kept rows."""
        mask = self.response_mask & self.keep_mask[:, None]
        return mask if self.token_keep_mask is None else mask & self.token_keep_mask

    @property
    def renormalizes(self) -> bool:
        """Whether rows or tokens leave the loss's denominator (`denominator_mask` is not
        every valid token)."""
        return self.denominator is not None

    @property
    def drops_tokens(self) -> bool:
        """Whether single tokens, not only whole rows, leave the loss's denominator
        (``tokens.renormalize``): a host that can only remove whole rows refuses it."""
        return self.denominator is not None and self.denominator.dim() == 2

    @property
    def loss_rows(self) -> Tensor:
        """[B] bool, the rows that stay in the loss's denominator (what a host that removes
        whole rows reads; with `drops_tokens`, the rows with a token in it)."""
        d = self.denominator
        if d is None:
            return torch.ones_like(self.keep_mask)
        return d if d.dim() == 1 else self.denominator_mask.any(1)

    @cached_property
    def denominator_mask(self) -> Tensor:
        """[B, T] bool, the tokens the loss is averaged over."""
        d = self.denominator
        if d is None:
            return self.response_mask
        if d.dim() == 1:
            return self.response_mask & d[:, None]
        return self.loss_mask if d is self.token_keep_mask else self.response_mask & d

    def denominator_tokens(self, rows: Tensor | None = None) -> Tensor:
        """int64 scalar, the tokens of `denominator_mask` (of ``rows`` only, [B] bool: a
        host that also leaves rows without a gradient out, the engine's
        ``informative-token-mean``)."""
        m = self.denominator_mask
        return m.sum() if rows is None else m[rows].sum()

    def aggregate(
        self,
        per_token_loss: Tensor,
        rows: Tensor | None = None,
        num_tokens: Tensor | int | None = None,
    ) -> Tensor:
        """The loss: ``sum(per_token_loss x weights_per_token over denominator_mask) /
        num_tokens`` (0 when nothing is in the denominator), with the graph of
        ``per_token_loss``.

        Args:
            per_token_loss: [B, T] the unweighted per-token loss; or, with ``rows``, [R, T']
                the loss of those rows and their first T' tokens (the rows and tokens left
                out must have a zero weighted loss: a host that skips rows without a
                gradient).
            rows: [R] int64 indices of the rows ``per_token_loss`` holds (None: all).
            num_tokens: the denominator (default: `denominator_tokens` of the whole batch).
        """
        w, m = self.weights_per_token, self.denominator_mask
        if rows is not None:
            w, m = w[rows], m[rows]
        shape = tuple(per_token_loss.shape)
        if per_token_loss.dim() != 2 or shape[0] != w.shape[0] or shape[1] > w.shape[1]:
            raise ValueError(
                f"aggregate: per_token_loss must be [{w.shape[0]}, <= {w.shape[1]}] "
                f"(the decision's rows{'' if rows is None else ' picked by rows'}), got {shape}"
            )
        T = shape[1]
        values = per_token_loss * w[:, :T].to(per_token_loss)  # its dtype and device
        mask = m[:, :T].to(values)
        den = self.denominator_tokens() if num_tokens is None else num_tokens
        den = torch.as_tensor(den, dtype=values.dtype, device=values.device)
        return (values * mask).sum() / den.clamp(min=1.0)

    @cached_property
    def weights_per_token(self) -> Tensor:
        """[B, T] float32 >= 0; 0 for dropped, padding and invalid rows and for padding
        tokens. Multiply into the per-token policy loss."""
        m = self.response_mask
        return self._write(torch.empty(m.shape, dtype=torch.float32, device=m.device))

    def write_weights_per_token(self, out: Tensor) -> Tensor:
        """`weights_per_token` written into the host's ``out`` [B, T] float32; returns it."""
        shape = tuple(self.response_mask.shape)
        if tuple(out.shape) != shape or out.dtype != torch.float32 or not out.is_contiguous():
            raise ValueError(
                f"write_weights_per_token: out must be a contiguous float32 tensor of shape "
                f"{shape}, got {out.dtype} {tuple(out.shape)}"
            )
        if "weights_per_token" in self.__dict__:
            return out.copy_(self.weights_per_token)
        return self._write(out)

    def _write(self, out: Tensor) -> Tensor:
        zero = torch.zeros((), dtype=torch.float32, device=out.device)
        if self.token_weights is None:
            w = self.weights_per_response.to(torch.float32)[:, None]
            return torch.where(self.loss_mask, w, zero, out=out)
        raw = self.token_weights.to(torch.float32)
        B = raw.shape[0]
        scale, offset = self.token_scale, self.token_offset
        scale = torch.ones(B, device=raw.device) if scale is None else scale.to(torch.float32)
        offset = torch.zeros(B, device=raw.device) if offset is None else offset.to(torch.float32)
        mask = self.response_mask
        if self.token_keep_mask is not None:
            mask = mask & self.token_keep_mask
        scale, offset = scale[:, None], offset[:, None]
        for i, j in row_chunks(*raw.shape):  # the mask on a chunk still in cache
            o = torch.addcmul(offset[i:j], raw[i:j], scale[i:j], out=out[i:j])
            torch.where(mask[i:j], o, zero, out=o)  # padding tokens (NaN-safe)
        dropped = (~self.keep_mask).nonzero().squeeze(1)
        if dropped.numel():
            out.index_fill_(0, dropped, 0.0)
        return out

    @cached_property
    def advantages(self) -> Tensor | None:
        """[B, T] recomputed advantages (0 on padding tokens), or None to keep the host's."""
        a = self.advantages_per_response
        return None if a is None else a[:, None] * self.response_mask.to(a.dtype)


class Strategy:
    """A composed data strategy, bound to a host's domains and advantage estimator.

    Args:
        spec: preset name, YAML path, mapping or `StrategySpec`.
        domains: domain names in id order (needed when ``mix`` is enabled).
        advantage_estimator: the host's estimator; group-based components need a group one.
        available_fields: optional `RolloutBatch` fields the host provides; a scorer that
            needs another is rejected here rather than mid-run.
        norm_adv_by_std: recomputed advantages divide by the group std (GRPO) or not (Dr. GRPO).
        adv_eps: the host's own std epsilon (verl and the engine 1e-6, TRL 1e-4).
        threads: torch intra-op threads `decide` runs with, restored after it (None: leave
            torch's setting); 1 by default: under load, 2-thread decisions were 3-30x slower
            (``benchmarks/strategy_overhead.py --load``).

    Attributes:
        reads: the optional per-token fields (`TOKEN_FIELDS`) the decision reads (components
            see `RolloutBatch.reading` of the batch: other fields invalidate no row).
        requires: every optional `RolloutBatch` field a component declares, plus
            ``advantages``.
    """

    def __init__(
        self,
        spec: Any = "baseline",
        *,
        domains: Sequence[str] | None = None,
        advantage_estimator: str = "grpo",
        available_fields: Sequence[str] | None = None,
        norm_adv_by_std: bool = True,
        adv_eps: float = 1e-6,
        threads: int | None = 1,
    ) -> None:
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ConfigError(f"threads: must be an int >= 1 or None, got {threads!r}")
        self.threads = threads
        if isinstance(adv_eps, bool) or not isinstance(adv_eps, (int, float)) or not adv_eps > 0:
            raise ConfigError(f"adv_eps: must be a number > 0, got {adv_eps!r}")
        self.adv_eps = float(adv_eps)
        self.spec, self.parts = _resolve(spec, domains, advantage_estimator, available_fields)
        self.advantage_estimator = advantage_estimator
        self.norm_adv_by_std = norm_adv_by_std
        self.domains = tuple(domains) if domains is not None else None
        self._mix_step = -1  # the last batch.step mixed (the mix clock is batch.step)
        declared = {"advantages"}
        for scorer, actuator in self.parts.values():
            for c in (scorer, actuator):
                declared.update(getattr(c, "requires", ()) if c is not None else ())
        self.reads: frozenset[str] = frozenset(f for f in TOKEN_FIELDS if f in declared)
        self.requires: frozenset[str] = frozenset(declared)
        self._drawn: Tensor | None = None
        self._drawn_last: Tensor | None = None  # that step's draws, replaced on a retry
        self._proportions: Tensor | None = None
        self._signal: Tensor | None = None
        self._history = None
        if "mix" in self.parts:
            mixer = self.parts["mix"][1]
            self._initial = _initial_proportions(self.spec, mixer, self.domains)
            self._proportions = apply_floor(self._initial, mixer.floor)
            self._drawn = torch.zeros(len(self.domains), dtype=torch.int64)
            self._drawn_last = torch.zeros_like(self._drawn)
        adm = self.spec.admission
        if adm is not None and not isinstance(adm.max_staleness, int) and self.domains:
            named = {d for d, _ in adm.max_staleness}
            missing, unknown = sorted(set(self.domains) - named), sorted(named - set(self.domains))
            if missing or unknown:
                raise ConfigError(
                    f"{self.spec.name}.admission.max_staleness: a per-domain limit names every "
                    f"domain ({', '.join(self.domains)}); "
                    + (f"missing {', '.join(missing)}" if missing else "")
                    + ("; " if missing and unknown else "")
                    + (f"unknown {', '.join(unknown)}" if unknown else "")
                )
        allocate = self.spec.rollouts is not None and self.spec.rollouts.mode == "allocate"
        if "prerollout" in self.parts or "curriculum" in self.parts or allocate:
            self._history = PromptHistory(history_size(self.spec.mechanisms()))
        self._rollouts = (
            None
            if self.spec.rollouts is None
            else ResponseBudget(self.spec.rollouts, len(self.domains or ()))
        )

    # ------------------------------------------------------------------ before generation
    @property
    def history(self):
        """The `PromptHistory` that ``prerollout`` and ``curriculum`` read (None without
        either); read-only use."""
        return self._history

    def prompt_log_weights(self, outcomes: Outcomes, step: int) -> tuple[Tensor, Tensor] | None:
        """Curriculum: ([N] float64 log-weights, [N] estimated pass rates) of N prompts whose
        remembered outcomes are ``outcomes`` (`PromptHistory.rows`), for the draw of step
        ``step``: the intake draws each domain's count with probabilities proportional to
        exp(log-weight) over the domain's pool. None without ``curriculum`` or when it is not
        due at ``step`` (the intake then draws as without one)."""
        if "curriculum" not in self.parts:
            return None
        mspec = self.spec.curriculum
        if not _due(step, mspec.warmup_steps, mspec.every):
            return None
        curriculum = self.parts["curriculum"][1]
        rate = curriculum.pass_rate(outcomes)
        lw = curriculum.log_weights(rate, step)
        n = outcomes.count.shape[0]
        for what, t in (("pass_rate", rate), ("log_weights", lw)):
            if (
                not isinstance(t, Tensor)
                or tuple(t.shape) != (n,)
                or not bool(torch.isfinite(t).all())
            ):
                got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"curriculum {type(curriculum).__qualname__}.{what} must return {n} "
                    f"finite values (one per prompt), got {got}"
                )
        return lw.to(torch.float64), rate.to(torch.float64)

    def curriculum_target(self, step: int) -> float | None:
        """The pass rate the curriculum aims at in the draw of ``step`` (None: no
        curriculum, or it is not due)."""
        if "curriculum" not in self.parts:
            return None
        mspec = self.spec.curriculum
        if not _due(step, mspec.warmup_steps, mspec.every):
            return None
        return float(self.parts["curriculum"][1].target_at(step))

    @property
    def signal(self) -> Tensor | None:
        """[D] the mixing signal at the last update (None before it or without ``mix``)."""
        return None if self._signal is None else self._signal.clone()

    @property
    def proportions(self) -> Tensor | None:
        """[D] current target domain proportions (None without ``mix``)."""
        return None if self._proportions is None else self._proportions.clone()

    @property
    def feature_layer(self) -> int | None:
        """The prompt representation the skip policy reads (`SkipPolicy.feature_layer`;
        None: none, or no pre-rollout)."""
        if "prerollout" not in self.parts:
            return None
        return self.parts["prerollout"][1].feature_layer

    def filter_prompts(
        self,
        prompt_keys: Sequence,
        step: int,
        generator: torch.Generator | None = None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        """Pre-rollout: which candidate prompts to generate. Returns ([N] bool keep, metrics).

        ``features``: [N, H] the candidates' representations, for a skip policy that reads
        them (`feature_layer`); a host that cannot give them is refused before training.
        """
        n = len(prompt_keys)
        if "prerollout" not in self.parts:
            return torch.ones(n, dtype=torch.bool), {}
        mspec = self.spec.prerollout
        if not _due(step, mspec.warmup_steps, mspec.every):
            return torch.ones(n, dtype=torch.bool), {"dataflex/prerollout/active": 0.0}
        policy = self.parts["prerollout"][1]
        keep, metrics = policy.filter(
            self._history, list(prompt_keys), step, generator, features=features
        )
        metrics["dataflex/prerollout/active"] = 1.0
        return keep, metrics

    def audit_prompts(
        self, skip: Tensor, plain: Tensor, generator: torch.Generator | None
    ) -> Tensor | None:
        """[N] bool: which skipped candidates to generate anyway for the false-skip audit (not
        trained on; `SkipPolicy.audit_mask`; ``plain``: [N] bool the plain batch's
        candidates); None: no audit."""
        if "prerollout" not in self.parts:
            return None
        return self.parts["prerollout"][1].audit_mask(skip, plain, generator)

    def observe_audit(self, batch: RolloutBatch) -> dict[str, float]:
        """The outcomes of audited prompts: the skip policy learns from them and the prompt
        history records them; no decision is made. Returns ``audit_groups`` and
        ``audit_informative`` (groups whose rewards were not all equal: false skips)."""
        if "prerollout" not in self.parts or batch.batch_size == 0:
            return {}
        batch = detach_batch(batch)
        self.parts["prerollout"][1].observe_audit(batch, self._history)
        self._history.update(batch)
        present = batch.group_size > 0
        return {
            "dataflex/prerollout/audit_groups": float(present.sum()),
            "dataflex/prerollout/audit_informative": float(((batch.group_std > 0) & present).sum()),
        }

    @property
    def refill_rounds(self) -> int:
        """Refill rounds at most per step (``refill.max_rounds``; 0: the strategy does not
        refill)."""
        return 0 if self.spec.refill is None else self.spec.refill.max_rounds

    @property
    def rollouts(self) -> RolloutsSpec | None:
        """The per-prompt rollout budget (``rollouts``; None: every prompt gets the host's
        group size)."""
        return self.spec.rollouts

    def response_counts(self, keys: Sequence, domain_ids: Sequence[int], total: int) -> Tensor:
        """``allocate``: [N] int64 responses for each of N prompts (``keys``, their
        ``domain_ids``), ``total`` in all (`allocate_counts` on `ResponseBudget.pass_rates`
        from the prompt history); pure."""
        r = self.spec.rollouts
        if r is None or r.mode != "allocate":
            raise ValueError("response_counts: the strategy has no rollouts.mode allocate")
        rates = self._rollouts.pass_rates(self._history.outcomes(list(keys)), domain_ids)
        return allocate_counts(rates, total, r.min_responses, r.max_responses, r.value)

    @property
    def refill_overdraw(self) -> bool:
        """Whether refill rounds draw the expected count that fills the step
        (``refill.overdraw``) rather than exactly the missing groups."""
        return self.spec.refill is not None and self.spec.refill.overdraw

    def groups_kept(self, batch: RolloutBatch) -> Tensor:
        """[G] bool: the present groups the selector keeps in ``batch`` (all of them when
        ``select`` is absent or not due), what a refilling host counts; pure (no state moves).
        A group kept here is kept by `decide`'s ``select`` in any batch that holds it."""
        present = batch.group_size > 0
        if "select" not in self.parts:
            return present
        mspec = self.spec.select
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            return present
        with intra_op_threads(self.threads):
            batch = detach_batch(batch).reading(self.reads)
            scorer, selector = self.parts["select"]
            scores = broadcast_scores(checked_scores(scorer, batch), scorer.granularity, batch)
            keep = selector.select(scores, batch) & batch.active_mask
            kept = torch.zeros(batch.num_groups, dtype=torch.bool)
            kept[batch.group_ids[keep]] = True
        return kept & present

    # ------------------------------------------------------------------ after advantages
    def decide(self, batch: RolloutBatch, observed: RolloutBatch | None = None) -> Decision:
        """Decide on ``batch`` (select, tokens, reweight: what the loss trains on) and learn
        from ``observed`` (mixing signals, drawn counts, the skip policy and the prompt
        history).

        **Observe vs decide, the one rule** (docs/concepts.md#observe-and-decide): a host
        passes as ``observed`` every group its step generated, the groups a selector dropped
        and refill groups it does not train on included, and as ``batch`` the groups its
        update trains on (`dataflex_rl.hosts.common.step`); None: they are the same.
        Inputs are detached once, so no part of the `Decision` carries gradients; components
        see ``batch.reading(self.reads)``. Runs with ``threads`` torch threads.
        """
        with intra_op_threads(self.threads):
            return self._decide(batch, batch if observed is None else observed)

    def _decide(self, batch: RolloutBatch, observed: RolloutBatch) -> Decision:
        t0 = time.perf_counter()
        same = observed is batch
        batch = detach_batch(batch).reading(self.reads)
        observed = batch if same else detach_batch(observed).reading(self.reads)
        metrics: dict[str, float] = {}
        active = batch.active_mask
        keep = active.clone()
        advantages = token_keep = selected = None
        renormalize = renormalize_tokens = False
        work = batch
        if "select" in self.parts:
            keep, advantages, renormalize = self._select(batch, metrics)
        if "tokens" in self.parts:
            selected = keep
            keep, token_keep, renormalize_tokens = self._tokens(batch, keep, metrics)
        if batch.batch_size and not bool(keep.any()) and bool(active.any()):
            warnings.warn(
                f"step {batch.step}: {self.spec.name} dropped every response; "
                "this step's update is empty (all weights 0)",
                StrategyWarning,
                stacklevel=3,
            )
        if "reweight" in self.parts:
            changes: dict[str, Any] = {}
            if token_keep is not None:
                # reweighting sees the kept tokens only: its mean 1 is over them
                changes["response_mask"] = batch.response_mask & token_keep
                changes["response_lengths"] = token_keep.sum(1)
            if advantages is not None:
                # the recomputed advantages, one per response: a [B, T] view without a copy
                # (padding tokens hold the row's value; every reader masks them)
                changes["advantages"] = advantages[:, None].expand(batch.response_mask.shape)
                changes["response_advantages"] = advantages
                changes.setdefault("response_lengths", batch.response_length)
            if changes:
                work = batch.replace(**changes)
        weights = Weights((keep & (batch.response_length > 0)).to(torch.float32))
        if "reweight" in self.parts:
            weights = self._reweight(work, keep, metrics)
        proportions = None
        if "mix" in self.parts:
            proportions = self._mix(observed, metrics)
        if self._history is not None:
            if "prerollout" in self.parts:
                self.parts["prerollout"][1].observe(observed, self._history)
            self._history.update(observed)
        if self._rollouts is not None:
            self._rollouts.observe(observed)
        denominator = None  # every valid token
        if renormalize_tokens:
            denominator = token_keep
        elif renormalize:
            denominator = selected if selected is not None else keep
        decision = Decision(
            keep,
            weights.per_response,
            batch.response_mask,
            advantages,
            proportions,
            metrics,
            weights.token_raw,
            weights.token_scale,
            weights.token_offset,
            token_keep,
            denominator,
        )
        metrics.update(
            step_metrics(
                batch,
                keep,
                weights.per_response,
                per_domain=self.domains is not None,
                signal=self._signal,
                kept_tokens=None if token_keep is None else token_keep.sum(1),
            )
        )
        metrics["dataflex/time_ms"] = (time.perf_counter() - t0) * 1e3
        return decision

    def _select(self, batch: RolloutBatch, metrics: dict) -> tuple[Tensor, Tensor | None, bool]:
        """(keep [B], recomputed advantages or None, renormalize)."""
        mspec = self.spec.select
        scorer, selector = self.parts["select"]
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            metrics["dataflex/select/active"] = 0.0
            return batch.active_mask.clone(), None, False
        metrics["dataflex/select/active"] = 1.0
        scores = broadcast_scores(checked_scores(scorer, batch), scorer.granularity, batch)
        keep = selector.select(scores, batch) & batch.active_mask
        recompute = resolved_option(mspec, "recompute_advantages")
        renormalize = resolved_option(mspec, "renormalize")
        metrics["dataflex/select/recompute_advantages"] = float(recompute)
        metrics["dataflex/select/renormalize"] = float(renormalize)
        adv = (
            grpo_advantages_per_response(batch, keep, self.norm_adv_by_std, self.adv_eps)
            if recompute
            else None
        )
        return keep, adv, renormalize

    def _tokens(
        self, batch: RolloutBatch, keep: Tensor, metrics: dict
    ) -> tuple[Tensor, Tensor | None, bool]:
        """(keep [B], token keep [B, T] or None, renormalize_tokens): the token-level selector
        on the rows ``keep`` holds, the other rows as padding; a row left without a kept token
        is dropped."""
        mspec = self.spec.tokens
        scorer, selector = self.parts["tokens"]
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            metrics["dataflex/tokens/active"] = 0.0
            return keep, None, False
        metrics["dataflex/tokens/active"] = 1.0
        if not torch.equal(keep, batch.active_mask):
            batch = batch.replace(is_padding=batch.is_padding | ~keep)
        scores = checked_scores(scorer, batch)
        token_keep = _checked_token_keep(selector, selector.select(scores, batch), batch)
        renormalize = resolved_option(mspec, "renormalize")
        metrics["dataflex/tokens/renormalize"] = float(renormalize)
        return token_keep.any(1), token_keep, renormalize

    def _reweight(self, batch: RolloutBatch, keep: Tensor, metrics: dict) -> Weights:
        """Scores -> raw weights -> `normalized_weights`: mean 1 over the normalization set
        (per token for token-level reweighters), 1 for the other kept rows, 0 for dropped
        rows and rows without valid tokens."""
        mspec = self.spec.reweight
        scorer, rw = self.parts["reweight"]
        kept = keep & (batch.response_length > 0)
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            metrics["dataflex/reweight/active"] = 0.0
            return Weights(kept.to(torch.float32))
        metrics["dataflex/reweight/active"] = 1.0
        informative = mspec.options["normalize"] == "informative"
        metrics["dataflex/reweight/normalize_informative"] = float(informative)
        norm_set = kept & (informative_mask(batch) if informative else batch.active_mask)
        metrics["dataflex/reweight/normalization_set"] = float(norm_set.sum())
        scores = broadcast_scores(checked_scores(scorer, batch), scorer.granularity, batch)
        raw = rw.raw_weights(scores, batch, norm_set)
        if not rw.normalized:  # absolute weights: as they are, on every kept row
            return Weights(torch.where(kept, raw.to(torch.float32), 0.0))
        return normalized_weights(
            raw, batch, kept, norm_set, f"step {batch.step}: {self.spec.name}"
        )

    def _mix(self, batch: RolloutBatch, metrics: dict) -> Tensor | None:
        """Observe the batch; update the proportions after step s when ``s + 1`` is due.

        The clock is ``batch.step``: a retried step replaces that step's observation, a
        skipped one leaves a gap; neither shifts the schedule.
        """
        mspec = self.spec.mix
        scorer, mixer = self.parts["mix"]
        D = len(self.domains)
        if batch.domains != self.domains:
            raise ValueError(
                f"batch domains {batch.domains} differ from the strategy's {self.domains}"
            )
        if scorer is not None:
            scorer.observe(batch)
        drawn = torch.bincount(batch.domain_ids[batch.active_mask], minlength=D)
        if batch.step == self._mix_step:  # a retry: its draws replace the first attempt's
            self._drawn -= self._drawn_last
        self._drawn += drawn
        self._drawn_last = drawn
        self._mix_step = batch.step
        if not _due(batch.step + 1, mspec.warmup_steps, mspec.every):
            metrics["dataflex/mix/updated"] = 0.0
            return None
        values, observed = scorer.values(D) if scorer is not None else (None, None)
        if scorer is not None:
            check_score_shape(scorer, values, (D,), "values(D)")
        raw = mixer.raw_proportions(values, observed, self._drawn.clone(), self._initial)
        self._proportions = apply_floor(raw, mixer.floor)
        self._signal = values
        metrics["dataflex/mix/updated"] = 1.0
        return self._proportions.clone()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Everything needed to continue exactly (component states and mixing state)."""
        return {
            "spec": self.spec.to_dict(),
            "components": {
                m: {"scorer": s.state_dict() if s is not None else {}, "actuator": a.state_dict()}
                for m, (s, a) in self.parts.items()
            },
            "steps_observed": self._mix_step + 1,
            "drawn": None if self._drawn is None else self._drawn.clone(),
            "drawn_last": None if self._drawn_last is None else self._drawn_last.clone(),
            "proportions": None if self._proportions is None else self._proportions.clone(),
            "signal": None if self._signal is None else self._signal.clone(),
            "history": None if self._history is None else self._history.state_dict(),
            "rollouts": None if self._rollouts is None else self._rollouts.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict` output; the spec must be the same."""
        if state["spec"] != self.spec.to_dict():
            raise ValueError(
                f"checkpoint was saved with strategy {state['spec']}, not {self.spec.to_dict()}"
            )
        for m, (s, a) in self.parts.items():
            if s is not None:
                s.load_state_dict(state["components"][m]["scorer"])
            a.load_state_dict(state["components"][m]["actuator"])
        self._mix_step = int(state["steps_observed"]) - 1
        for key in ("drawn", "drawn_last", "proportions", "signal"):
            v = state[key]
            setattr(self, f"_{key}", None if v is None else v.clone())
        if self._history is not None:
            self._history.load_state_dict(state["history"])
        if self._rollouts is not None:
            self._rollouts.load_state_dict(state["rollouts"])


def _checked_token_keep(selector, mask, batch: RolloutBatch) -> Tensor:
    """A token-level selector's [B, T] keep mask, restricted to the valid tokens of active
    rows; refused unless it is a bool tensor of the batch's [B, T] shape."""
    shape = tuple(batch.response_mask.shape)
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != shape:
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, Tensor) else type(mask)
        raise ValueError(
            f"selector {type(selector).__qualname__}.select must return a bool tensor of "
            f"shape [B, T] = {shape} (level token), got {got}"
        )
    return mask & token_mask(batch)


def check_strategy(
    spec: Any,
    *,
    domains: Sequence[str] | None = None,
    advantage_estimator: str = "grpo",
    available_fields: Sequence[str] | None = None,
) -> StrategySpec:
    """Check a strategy for a host without building it; returns the parsed spec.

    Raises every `ConfigError` that building the `Strategy` with these arguments raises,
    and makes no state (a host checks its configuration before its workers start).
    """
    parsed, parts = _resolve(spec, domains, advantage_estimator, available_fields)
    if "mix" in parts:
        _initial_proportions(parsed, parts["mix"][1], domains)
    return parsed


def group_parts(spec: Any) -> list[str]:
    """What in a strategy needs prompt groups, as ``"<mechanism>: <part>"`` (a component's
    class name, or ``recompute_advantages``); empty when a non-group estimator serves it."""
    parsed = parse_strategy(spec)
    return [
        f"{mech}: {part}"
        for mech, mspec in parsed.mechanisms().items()
        for part in _group_parts(mspec, *resolve_mechanism(mspec, f"{parsed.name}.{mech}"))
    ]


def _resolve(
    spec: Any,
    domains: Sequence[str] | None,
    estimator: str,
    available: Sequence[str] | None,
) -> tuple[StrategySpec, dict[str, tuple[Scorer | None, Component]]]:
    """The parsed spec and each mechanism's (scorer, actuator), checked against the host."""
    parsed = parse_strategy(spec)
    if estimator not in GROUP_ESTIMATORS | NON_GROUP_ESTIMATORS:
        raise ConfigError(
            f"advantage_estimator: unknown {estimator!r}. Group estimators: "
            f"{', '.join(sorted(GROUP_ESTIMATORS))}; others: "
            f"{', '.join(sorted(NON_GROUP_ESTIMATORS))}"
        )
    if domains is not None:
        check_domain_names(tuple(domains))
    parts = {}
    for mech, mspec in parsed.mechanisms().items():
        where = f"{parsed.name}.{mech}"
        scorer, actuator = resolve_mechanism(mspec, where)
        _check_host_fit(mspec, scorer, actuator, estimator, available, domains, where)
        parts[mech] = (scorer, actuator)
    if "mix" in parts and domains is None:
        raise ConfigError(f"{parsed.name}.mix: the host must give the domain names")
    return parsed, parts


def _group_parts(mspec: MechanismSpec, scorer: Scorer | None, actuator: Component) -> list[str]:
    names = [
        type(c).__name__
        for c in (scorer, actuator)
        if c is not None
        and (getattr(c, "group_based", False) or getattr(c, "granularity", None) == "group")
    ]
    if mspec.mechanism == "select" and resolved_option(mspec, "recompute_advantages"):
        names.append("recompute_advantages")
    return names


def _check_host_fit(mspec, scorer, actuator, estimator, available, domains, where) -> None:
    group_parts = _group_parts(mspec, scorer, actuator)
    if group_parts and estimator in NON_GROUP_ESTIMATORS:
        raise ConfigError(
            f"{where}: {', '.join(group_parts)} needs prompt groups, but the advantage "
            f"estimator {estimator!r} has none. Use a group estimator "
            f"({', '.join(sorted(GROUP_ESTIMATORS))}) or a response-level scorer"
        )
    if available is not None:
        have = set(available)
        if "response_advantages" in have:  # per-response advantages stand for them
            have.add("advantages")
        for role, comp in (("scorer", scorer), ("actuator", actuator)):
            missing = [f for f in getattr(comp, "requires", ()) if f not in have]
            if comp is not None and missing:
                raise ConfigError(
                    f"{where}.{role}: {type(comp).__name__}{_settings(comp)} needs "
                    f"{', '.join(missing)}, which this host does not provide"
                )
    if isinstance(actuator, Mixer) and domains is not None:
        D = len(domains)
        if actuator.floor * D > 1 + 1e-12:
            raise ConfigError(
                f"{where}.actuator.floor: {actuator.floor} * {D} domains "
                f"> 1; use floor <= {1 / D:.4f}"
            )


def _settings(comp) -> str:
    """`` (scope: micro_batch)`` for a component whose needs depend on its parameters."""
    scope = getattr(comp, "scope", None)
    return f" (scope: {scope})" if scope is not None else ""


def _initial_proportions(spec: StrategySpec, mixer: Mixer, domains: Sequence[str]) -> Tensor:
    """[D] the mixer's proportions before its first update (from ``mix.prior``)."""
    domains = tuple(domains)
    prior = spec.mix.options.get("prior")
    prior = (
        normalize_proportions(prior, domains, f"{spec.name}.mix.prior")
        if prior is not None
        else torch.full((len(domains),), 1.0 / len(domains), dtype=torch.float64)
    )
    try:
        return mixer.initial(prior, domains)
    except ConfigError as e:  # e.g. static proportions that do not fit the domains
        raise ConfigError(f"{spec.name}.mix.actuator: {e}") from None


def detach_batch(batch: RolloutBatch) -> RolloutBatch:
    """``batch`` with its float fields detached from autograd (the same object when none
    requires grad)."""
    changes = {
        name: t.detach()
        for name in ("rewards", "advantages", "old_log_probs", "response_advantages", "entropies")
        if (t := getattr(batch, name)) is not None and t.requires_grad
    }
    return batch.replace(**changes) if changes else batch


@contextmanager
def intra_op_threads(n: int | None):
    """Run the block with ``n`` torch intra-op threads (None: unchanged), then restore the
    previous count (per OS thread; a thread that first touches torch inside inherits ``n``)."""
    prev = torch.get_num_threads()
    if n is None or n == prev:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


class Weights(NamedTuple):
    """A decision's weights: [B] per response, and for token-level reweighting the [B, T] raw
    token weights with the per-row scale and offset that normalize them (see `Decision`)."""

    per_response: Tensor
    token_raw: Tensor | None = None
    token_scale: Tensor | None = None
    token_offset: Tensor | None = None


def normalized_weights(
    raw: Tensor, batch: RolloutBatch, kept: Tensor, norm_set: Tensor, who: str = "weights"
) -> Weights:
    """Raw weights -> weights of mean 1 over the normalization set: the one normalization.

    w = raw / m on the ``norm_set`` rows (tokens, for [B, T] ``raw``), m their mean raw weight
    (summed in float64); 1 on the other ``kept`` rows, 0 elsewhere. m = 0 leaves weights at 1,
    with a `StrategyWarning`.

    Args:
        raw: [B] or [B, T] raw weights, finite and >= 0 on the rows (tokens) that count.
        batch: the batch (its mask and lengths).
        kept: [B] bool, the kept rows with valid tokens.
        norm_set: [B] bool, a subset of ``kept``.
        who: names the decision in the warning.
    """
    if raw.dim() == 1:
        sums = raw.to(torch.float64)
        counts = torch.ones_like(batch.response_length)
    else:
        sums = masked_row_sums(raw, batch.response_mask).to(torch.float64)
        counts = batch.response_length
    total = torch.where(norm_set, sums, 0.0).sum()
    mean = float(total / torch.where(norm_set, counts, 0).sum().clamp(min=1))
    if mean <= 0 and bool(norm_set.any()):
        warnings.warn(
            f"{who}: every raw weight in the normalization set is 0; "
            "weights left at 1 (mean 1 cannot be reached)",
            StrategyWarning,
            stacklevel=5,
        )
    use = norm_set & (mean > 0)
    scale = torch.where(use, 1.0 / mean if mean > 0 else 0.0, 0.0).to(torch.float64)
    offset = (kept & ~use).to(torch.float64)
    per_response = torch.where(use, sums * scale / counts.clamp(min=1), offset).to(torch.float32)
    if raw.dim() == 1:
        return Weights(per_response)
    return Weights(per_response, raw, scale.to(torch.float32), offset.to(torch.float32))
