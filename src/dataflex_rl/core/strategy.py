"""`Strategy`: the composition of select / reweight / mix / prerollout, one decision per step.

Order inside a training step (DESIGN §5)::

    prerollout (filter_prompts) -> mix (proportions) -> generation -> reward -> advantages
        -> select -> reweight -> loss                 (decide)

Hosts call `Strategy.filter_prompts` before generation, draw the next batch with
`Strategy.proportions`, and call `Strategy.decide` after advantages. The `Decision` says, per
token, how much each counts; the host multiplies ``weights_per_token`` into its per-token policy
loss and, when ``renormalize`` is set, averages over ``loss_mask`` instead of the response mask.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from dataflex_rl.core.advantages import grpo_advantages_per_response
from dataflex_rl.core.base import Mixer, Scorer, check_score_shape, checked_scores
from dataflex_rl.core.batch import TOKEN_FIELDS, RolloutBatch
from dataflex_rl.core.component import Component
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.metrics import check_domain_names, step_metrics
from dataflex_rl.core.native import NativeUnavailable, TokenKernels, load_token_kernels
from dataflex_rl.core.proportions import apply_floor, normalize_proportions
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rowops import CHUNK_ELEMS
from dataflex_rl.core.spec import MechanismSpec, StrategySpec, parse_strategy, resolve_mechanism

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
    """What a strategy decided for one batch.

    A decision is held per response; its [B, T] views (``weights_per_token``, ``loss_mask``,
    ``advantages``) are built on first access and cached, so a host pays for a [B, T] buffer
    only when it reads one (at 8k x 4k tokens each costs more than the whole decision).

    Attributes:
        keep_mask: [B] bool, responses that take part in the update.
        weights_per_response: [B] float32, mean token weight over each row's valid tokens
            (0 for dropped, padding and invalid rows and for rows without tokens).
        response_mask: [B, T] bool, the batch's valid tokens (not copied).
        renormalize: average the loss over ``loss_mask`` (True) or the original mask.
        advantages_per_response: [B] recomputed advantages, or None to keep the host's.
        proportions: [D] domain proportions for the next batches when an update was due.
        metrics: ``dataflex/...`` scalars.
        token_weights: [B, T] the final per-token weights when a token-level reweighter
            made them (then ``weights_per_token`` returns this tensor), else None (also when
            they are built on first access, see ``token_weights_fn``).
        token_weights_fn: builds the final [B, T] token weights on first access of
            ``weights_per_token`` (token-level reweighters whose weights are affine in a
            scorer with `Scorer.row_sums`: the decision itself needs only B sums), or None.
    """

    keep_mask: Tensor
    weights_per_response: Tensor
    response_mask: Tensor = field(repr=False)
    renormalize: bool = False
    advantages_per_response: Tensor | None = None
    proportions: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    token_weights: Tensor | None = field(default=None, repr=False)
    token_weights_fn: Callable[[], Tensor] | None = field(default=None, repr=False)

    @cached_property
    def loss_mask(self) -> Tensor:
        """[B, T] bool, valid tokens of kept rows."""
        return self.response_mask & self.keep_mask[:, None]

    @cached_property
    def weights_per_token(self) -> Tensor:
        """[B, T] float32 >= 0; 0 for dropped, padding and invalid rows and for padding
        tokens. Multiply into the per-token policy loss."""
        if self.token_weights is not None:
            return self.token_weights
        if self.token_weights_fn is not None:
            return self.token_weights_fn()
        return torch.where(self.loss_mask, self.weights_per_response[:, None], 0.0)

    def write_weights_per_token(self, out: Tensor) -> Tensor:
        """`weights_per_token` written into ``out`` [B, T] float32, a buffer the host keeps
        from step to step (a fresh [B, T] tensor costs its page faults, at 8k x 4k tokens
        about as much as a pass over it); returns ``out``."""
        shape = tuple(self.response_mask.shape)
        if tuple(out.shape) != shape or out.dtype != torch.float32 or not out.is_contiguous():
            raise ValueError(
                f"write_weights_per_token: out must be a contiguous float32 tensor of shape "
                f"{shape}, got {out.dtype} {tuple(out.shape)}"
            )
        fn = self.token_weights_fn
        if "weights_per_token" in self.__dict__ or self.token_weights is not None:
            return out.copy_(self.weights_per_token)
        if isinstance(fn, AffineTokenWeights):
            return fn(out)
        if fn is not None:
            return out.copy_(fn())
        zero = torch.zeros((), dtype=torch.float32, device=out.device)
        w = self.weights_per_response.to(torch.float32)[:, None]
        return torch.where(self.loss_mask, w, zero, out=out)

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
        norm_adv_by_std: whether recomputed advantages divide by the group std (GRPO) or not
            (Dr. GRPO).
        threads: torch intra-op threads `decide` runs with (default 1); None leaves torch's
            setting alone. A decision is a few passes over memory next to a training step:
            a second thread gains little on an idle machine, and next to other busy
            processes every OpenMP region waits for its slowest thread, which made 2-thread
            decisions 3-30x slower than 1-thread ones (``benchmarks/strategy_overhead.py
            --load``). The count is set for the call and restored after it; torch's OpenMP
            thread count is per calling thread, but a thread that first uses torch *during*
            a decision would start with this count.
        native: compiled token kernels (`core.native`) for token-level reweighting whose
            weights are affine in ``token_prob`` (``ar``): its passes over the [B, T]
            log-probs become one loop per row over the valid tokens (1.3-1.5x one fused
            read-and-write pass instead of ~8x, ``benchmarks/strategy_overhead.py``). None
            (default): use them when a build is cached or a C compiler can make one,
            else torch, with a `StrategyWarning` saying why; True: require them (a
            `ConfigError` here when they cannot be built); False: torch only. Other
            strategies never build them.

    Attributes:
        reads: the optional per-token fields (`TOKEN_FIELDS`) the decision reads: the ones its
            components declare (``requires``) plus ``advantages``, which decide which rows are
            valid and informative. Components see `RolloutBatch.reading` of the batch: the
            other fields are absent, never read or validated.
        kernels: the loaded `TokenKernels` when the decision uses them, else None.
    """

    def __init__(
        self,
        spec: Any = "baseline",
        *,
        domains: Sequence[str] | None = None,
        advantage_estimator: str = "grpo",
        available_fields: Sequence[str] | None = None,
        norm_adv_by_std: bool = True,
        threads: int | None = 1,
        native: bool | None = None,
    ) -> None:
        self.spec: StrategySpec = parse_strategy(spec)
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ConfigError(f"threads: must be an int >= 1 or None, got {threads!r}")
        self.threads = threads
        if advantage_estimator not in GROUP_ESTIMATORS | NON_GROUP_ESTIMATORS:
            raise ConfigError(
                f"advantage_estimator: unknown {advantage_estimator!r}. Group estimators: "
                f"{', '.join(sorted(GROUP_ESTIMATORS))}; others: "
                f"{', '.join(sorted(NON_GROUP_ESTIMATORS))}"
            )
        self.advantage_estimator = advantage_estimator
        self.norm_adv_by_std = norm_adv_by_std
        self.domains = tuple(domains) if domains is not None else None
        if self.domains is not None:
            check_domain_names(self.domains)
        self.parts: dict[str, tuple[Scorer | None, Component]] = {}
        for mech, mspec in self.spec.mechanisms().items():
            where = f"{self.spec.name}.{mech}"
            scorer, actuator = resolve_mechanism(mspec, where)
            self._check_host_fit(mech, mspec, scorer, actuator, available_fields, where)
            self.parts[mech] = (scorer, actuator)
        self._mix_step = -1  # the last batch.step mixed (the mix clock is batch.step)
        declared = {"advantages"}
        for scorer, actuator in self.parts.values():
            for c in (scorer, actuator):
                declared.update(getattr(c, "requires", ()) if c is not None else ())
        self.reads: frozenset[str] = frozenset(f for f in TOKEN_FIELDS if f in declared)
        self._native = native
        self.kernels = self._load_kernels(native)
        self._drawn: Tensor | None = None
        self._drawn_last: Tensor | None = None  # that step's draws, replaced on a retry
        self._proportions: Tensor | None = None
        self._signal: Tensor | None = None
        self._history = None
        if "mix" in self.parts:
            if self.domains is None:
                raise ConfigError(f"{self.spec.name}.mix: the host must give the domain names")
            mixer = self.parts["mix"][1]
            prior = self._prior()
            try:
                self._initial = mixer.initial(prior, self.domains)
            except ConfigError as e:  # e.g. static proportions that do not fit the domains
                raise ConfigError(f"{self.spec.name}.mix.actuator: {e}") from None
            self._proportions = apply_floor(self._initial, mixer.floor)
            self._drawn = torch.zeros(len(self.domains), dtype=torch.int64)
            self._drawn_last = torch.zeros_like(self._drawn)
        if "prerollout" in self.parts:
            self._history = PromptHistory(self.spec.prerollout.options["history_size"])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["kernels"] = None  # a handle to this process's library: loaded again there
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # in the receiving process (a Ray worker, a copy): as at construction, so a machine
        # without a compiler or a cached build falls back to torch with a warning
        self.kernels = self._load_kernels(self.__dict__.get("_native"))

    # ------------------------------------------------------------------ build-time checks
    def _load_kernels(self, native: bool | None) -> TokenKernels | None:
        if native is not None and not isinstance(native, bool):
            raise ConfigError(f"native: must be true, false or null, got {native!r}")
        part = self.parts.get("reweight")
        wants = (
            part is not None
            and part[1].level == "token"
            and part[1].affine() is not None
            and part[0] is not None
            and type(part[0]).write_affine_ is not Scorer.write_affine_
        )
        if native is False or not wants:
            return None
        try:
            return load_token_kernels()
        except NativeUnavailable as e:
            if native:
                raise ConfigError(f"{self.spec.name}: native: {e}") from None
            warnings.warn(
                f"{self.spec.name}: token weights are computed in torch, several times "
                f"slower (compiled kernels unavailable: {e}); Strategy(native=False) "
                "silences this",
                StrategyWarning,
                stacklevel=3,
            )
            return None

    def _check_host_fit(self, mech, mspec, scorer, actuator, available, where) -> None:
        group_parts = [
            type(c).__name__
            for c in (scorer, actuator)
            if c is not None
            and (getattr(c, "group_based", False) or getattr(c, "granularity", None) == "group")
        ]
        if mech == "select" and self._opt("select", "recompute_advantages", actuator, mspec):
            group_parts.append("recompute_advantages")
        if group_parts and self.advantage_estimator in NON_GROUP_ESTIMATORS:
            raise ConfigError(
                f"{where}: {', '.join(group_parts)} needs prompt groups, but the advantage "
                f"estimator {self.advantage_estimator!r} has none. Use a group estimator "
                f"({', '.join(sorted(GROUP_ESTIMATORS))}) or a response-level scorer"
            )
        if available is not None and scorer is not None:
            have = set(available)
            if "response_advantages" in have:  # per-response advantages stand for them
                have.add("advantages")
            missing = [f for f in scorer.requires if f not in have]
            if missing:
                raise ConfigError(
                    f"{where}.scorer: {type(scorer).__name__} needs "
                    f"{', '.join(missing)}, which this host does not provide"
                )
        if isinstance(actuator, Mixer) and self.domains is not None:
            D = len(self.domains)
            if actuator.floor * D > 1 + 1e-12:
                raise ConfigError(
                    f"{where}.actuator.floor: {actuator.floor} * {D} domains "
                    f"> 1; use floor <= {1 / D:.4f}"
                )

    @staticmethod
    def _opt(mech: str, key: str, actuator: Component, mspec: MechanismSpec) -> bool:
        value = mspec.options.get(key)
        if value is None:
            value = getattr(type(actuator), f"{key}_default", False)
        return bool(value)

    def _prior(self) -> Tensor:
        D = len(self.domains)
        prior = self.spec.mix.options.get("prior")
        return (
            normalize_proportions(prior, self.domains, f"{self.spec.name}.mix.prior")
            if prior is not None
            else torch.full((D,), 1.0 / D, dtype=torch.float64)
        )

    # ------------------------------------------------------------------ before generation
    @property
    def history(self):
        """The pre-rollout `PromptHistory` (None without ``prerollout``); read-only use."""
        return self._history

    @property
    def signal(self) -> Tensor | None:
        """[D] the mixing signal at the last update (None before it or without ``mix``)."""
        return None if self._signal is None else self._signal.clone()

    @property
    def proportions(self) -> Tensor | None:
        """[D] current target domain proportions (None without ``mix``)."""
        return None if self._proportions is None else self._proportions.clone()

    def filter_prompts(
        self, prompt_keys: Sequence, step: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, dict]:
        """Pre-rollout: which candidate prompts to generate. Returns ([N] bool keep, metrics)."""
        n = len(prompt_keys)
        if "prerollout" not in self.parts:
            return torch.ones(n, dtype=torch.bool), {}
        mspec = self.spec.prerollout
        if not _due(step, mspec.warmup_steps, mspec.every):
            return torch.ones(n, dtype=torch.bool), {"dataflex/prerollout/active": 0.0}
        policy = self.parts["prerollout"][1]
        keep, metrics = policy.filter(self._history, list(prompt_keys), step, generator)
        metrics["dataflex/prerollout/active"] = 1.0
        return keep, metrics

    # ------------------------------------------------------------------ after advantages
    def decide(self, batch: RolloutBatch) -> Decision:
        """Select and reweight this batch; update mixing signals and prompt histories.

        A decision never carries gradients: inputs that require grad (rewards, advantages,
        old log-probs) are detached here, once, so every weight, mask and advantage of the
        `Decision` has ``requires_grad`` False and no ``grad_fn``.

        Components and metrics see ``batch.reading(self.reads)``: a per-token field no
        component declares is neither read nor validated (see `reads`). Runs with
        ``threads`` torch threads.
        """
        with intra_op_threads(self.threads):
            return self._decide(batch)

    def _decide(self, batch: RolloutBatch) -> Decision:
        t0 = time.perf_counter()
        batch = detach_batch(batch).reading(self.reads).with_kernels(self.kernels)
        metrics: dict[str, float] = {}
        active = batch.active_mask
        keep = active.clone()
        advantages = None
        renormalize = False
        work = batch
        if "select" in self.parts:
            keep, advantages, renormalize = self._select(batch, metrics)
            if advantages is not None and "reweight" in self.parts:
                # the recomputed advantages, one per response: a [B, T] view without a copy
                # (padding tokens hold the row's value; every reader masks them)
                work = batch.replace(
                    advantages=advantages[:, None].expand(batch.response_mask.shape),
                    response_advantages=advantages,
                )
        has_tokens = batch.response_length > 0
        w_resp = (keep & has_tokens).to(torch.float32)
        w_tok = None
        if "reweight" in self.parts:
            w_resp, w_tok = self._reweight(work, keep, metrics)
        proportions = None
        if "mix" in self.parts:
            proportions = self._mix(batch, metrics)
        if self._history is not None:
            self.parts["prerollout"][1].observe(batch, self._history)
            self._history.update(batch)
        tok, tok_fn = (None, w_tok) if isinstance(w_tok, AffineTokenWeights) else (w_tok, None)
        decision = Decision(
            keep,
            w_resp,
            batch.response_mask,
            renormalize,
            advantages,
            proportions,
            metrics,
            tok,
            tok_fn,
        )
        metrics.update(
            step_metrics(
                batch, keep, w_resp, per_domain=self.domains is not None, signal=self._signal
            )
        )
        metrics["dataflex/time_ms"] = (time.perf_counter() - t0) * 1e3
        return decision

    def _select(self, batch: RolloutBatch, metrics: dict) -> tuple[Tensor, Tensor | None, bool]:
        mspec = self.spec.select
        scorer, selector = self.parts["select"]
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            metrics["dataflex/select/active"] = 0.0
            return batch.active_mask.clone(), None, False
        metrics["dataflex/select/active"] = 1.0
        scores = broadcast_scores(checked_scores(scorer, batch), scorer.granularity, batch)
        keep = selector.select(scores, batch) & batch.active_mask
        recompute = self._opt("select", "recompute_advantages", selector, mspec)
        renormalize = self._opt("select", "renormalize", selector, mspec)
        metrics["dataflex/select/recompute_advantages"] = float(recompute)
        metrics["dataflex/select/renormalize"] = float(renormalize)
        adv = grpo_advantages_per_response(batch, keep, self.norm_adv_by_std) if recompute else None
        if batch.batch_size and not bool(keep.any()) and bool(batch.active_mask.any()):
            warnings.warn(
                f"step {batch.step}: {self.spec.name} dropped every response; "
                "this step's update is empty (all weights 0)",
                StrategyWarning,
                stacklevel=4,
            )
        return keep, adv, renormalize

    def _reweight(
        self, batch: RolloutBatch, keep: Tensor, metrics: dict
    ) -> tuple[Tensor, Tensor | None]:
        """([B] weights per response, [B, T] final token weights or None).

        Weights have mean 1 over the normalization set (per token for token-level
        reweighters) and are 1 for the other kept rows, 0 for dropped rows and rows without
        valid tokens.
        """
        mspec = self.spec.reweight
        scorer, rw = self.parts["reweight"]
        n_tok = batch.response_length
        kept = keep & (n_tok > 0)
        if not _due(batch.step, mspec.warmup_steps, mspec.every):
            metrics["dataflex/reweight/active"] = 0.0
            return kept.to(torch.float32), None
        metrics["dataflex/reweight/active"] = 1.0
        informative = mspec.options["normalize"] == "informative"
        metrics["dataflex/reweight/normalize_informative"] = float(informative)
        norm_set = kept & (batch.informative_mask if informative else batch.active_mask)
        metrics["dataflex/reweight/normalization_set"] = float(norm_set.sum())
        ab = rw.affine() if rw.level == "token" else None
        sums = scorer.row_sums(batch) if ab is not None else None
        if sums is not None:  # B sums suffice; the [B, T] weights are built when read
            check_score_shape(scorer, sums, (batch.batch_size,), "row_sums(batch)")
            return self._affine_token_weights(batch, scorer, ab, sums, kept, norm_set)
        scores = broadcast_scores(checked_scores(scorer, batch), scorer.granularity, batch)
        owned = rw.in_place
        if owned:  # compute into a tensor this strategy owns (token level: no [B, T] copy)
            if not scorer.returns_new:
                scores = scores.clone()
            raw = rw.raw_weights_(scores, batch, norm_set)
        else:
            raw = rw.raw_weights(scores, batch, norm_set)
        if rw.level == "token":
            if raw.dtype != torch.float32:
                raw, owned = raw.to(torch.float32), True
            return self._token_weights(batch, raw, kept, norm_set, owned)
        raw = raw.to(torch.float64)  # normalize first: raw weights may overflow float32
        mean = (raw * norm_set).sum() / norm_set.sum().clamp(min=1)
        if float(mean) <= 0 and bool(norm_set.any()):
            _warn_zero_mean(batch.step, self.spec.name)
        w = raw / mean if float(mean) > 0 else torch.ones_like(raw)
        return (torch.where(norm_set, w, torch.ones_like(w)) * kept).to(torch.float32), None

    @staticmethod
    def _token_weights(
        batch: RolloutBatch, raw: Tensor, kept: Tensor, norm_set: Tensor, owned: bool
    ) -> tuple[Tensor, Tensor]:
        """Token-level raw weights [B, T] -> (weights per response, final token weights).

        Mean 1 over the valid tokens of ``norm_set`` rows: w = raw / mean there, 1 on the
        valid tokens of other kept rows, 0 elsewhere. Per-row sums of ``raw`` give the mean and
        the per-response weights; the [B, T] result is one multiply-add per row and one mask,
        written into ``raw`` when the strategy ``owned`` it.
        """
        blocks = batch.token_blocks
        row_sum = blocks.row_sums(raw)  # [B] over valid tokens
        n_tok = batch.response_length
        scale, offset, use = _token_scale(batch.step, row_sum, n_tok, kept, norm_set)
        scale, offset = scale.to(torch.float32), offset.to(torch.float32)
        weights = raw if owned else torch.empty_like(raw)
        torch.addcmul(offset[:, None], raw, scale[:, None], out=weights)
        blocks.fill_invalid_(weights, 0.0)
        per_response = torch.where(use, row_sum * scale / n_tok.clamp(min=1), offset)
        return per_response.to(torch.float32), weights

    @staticmethod
    def _affine_token_weights(
        batch: RolloutBatch,
        scorer: Scorer,
        ab: tuple[float, float],
        sums: Tensor,
        kept: Tensor,
        norm_set: Tensor,
    ) -> tuple[Tensor, AffineTokenWeights]:
        """`_token_weights` for raw = a * score + b, from the scorer's B row sums.

        The final weight of a valid token of row i is scale_i * (a * s + b) + offset_i =
        A_i * s + C_i; `AffineTokenWeights` writes them when the host reads them.
        """
        a, b = ab
        n_tok = batch.response_length
        row_sum = a * sums.to(torch.float64) + b * n_tok.to(torch.float64)
        scale, offset, use = _token_scale(batch.step, row_sum, n_tok, kept, norm_set)
        per_response = torch.where(use, row_sum * scale / n_tok.clamp(min=1), offset)
        A = (scale * a).to(torch.float32)
        C = (scale * b + offset).to(torch.float32)
        return per_response.to(torch.float32), AffineTokenWeights(batch, scorer, A, C, kept)

    def _mix(self, batch: RolloutBatch, metrics: dict) -> Tensor | None:
        """Observe the batch; update the proportions when the schedule says so.

        The clock is ``batch.step``, as for select and reweight: the proportions are updated
        after step s when ``s + 1`` steps are due (``warmup_steps``, ``every``). A retried step
        (``decide`` again with the same ``batch.step``) replaces that step's observation; a
        skipped step leaves a gap. Neither shifts the schedule.
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
        for key in ("drawn", "proportions", "signal"):
            v = state[key]
            setattr(self, f"_{key}", None if v is None else v.clone())
        last = state.get("drawn_last")  # absent in states saved before the step clock
        self._drawn_last = (
            last.clone()
            if last is not None
            else (None if self._drawn is None else torch.zeros_like(self._drawn))
        )
        if self._history is not None:
            self._history.load_state_dict(state["history"])


def detach_batch(batch: RolloutBatch) -> RolloutBatch:
    """``batch`` with its float fields detached from autograd (the same object when none
    requires grad)."""
    changes = {
        name: t.detach()
        for name in ("rewards", "advantages", "old_log_probs", "response_advantages")
        if (t := getattr(batch, name)) is not None and t.requires_grad
    }
    return batch.replace(**changes) if changes else batch


@contextmanager
def intra_op_threads(n: int | None):
    """Run the block with ``n`` torch intra-op threads, then restore the previous count.

    Nothing is set when ``n`` is None or already the current count. torch's OpenMP thread
    count is per OS thread once that thread has used torch, so other running threads keep
    theirs; a thread that first touches torch inside the block would inherit ``n``.
    """
    prev = torch.get_num_threads()
    if n is None or n == prev:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def _token_scale(
    step: int, row_sum: Tensor, n_tok: Tensor, kept: Tensor, norm_set: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row (scale, offset, use) that give token weights mean 1 over the valid tokens of
    ``norm_set`` rows: w = raw * scale + offset (scale 1 / mean on ``use`` rows, offset 1 on
    the other kept rows), from each row's sum of raw weights."""
    total = torch.where(norm_set, row_sum, 0.0).sum()
    count = torch.where(norm_set, n_tok, 0).sum().clamp(min=1)
    mean = float(total / count)
    if mean <= 0 and bool(norm_set.any()):
        _warn_zero_mean(step, "token weights", stacklevel=7)
    use = norm_set & (mean > 0)
    scale = torch.where(use, 1.0 / mean if mean > 0 else 0.0, 0.0).to(row_sum.dtype)
    offset = (kept & ~use).to(row_sum.dtype)
    return scale, offset, use


class AffineTokenWeights:
    """Builds [B, T] token weights ``A_i * s_t + C_i`` on the valid tokens of the ``rows``
    (0 elsewhere), ``s`` the scorer's token scores, in one pass a chunk of rows at a time:
    `Scorer.score_rows_` writes a chunk, which is scaled and masked while it is in cache."""

    def __init__(
        self, batch: RolloutBatch, scorer: Scorer, A: Tensor, C: Tensor, rows: Tensor
    ) -> None:
        self.batch, self.scorer, self.A, self.C, self.rows = batch, scorer, A, C, rows

    def __call__(self, out: Tensor | None = None) -> Tensor:
        """The weights, in a new tensor or written into ``out`` [B, T] float32."""
        m = self.batch.response_mask
        B, T = m.shape
        if out is None:
            out = torch.empty(B, T, dtype=torch.float32, device=m.device)
        zero_rows = ~self.rows
        A = self.A.masked_fill(zero_rows, 0.0)
        C = self.C.masked_fill(zero_rows, 0.0)
        if self.scorer.write_affine_(self.batch, A, C, out):
            return out
        zero = torch.zeros((), dtype=torch.float32, device=m.device)
        step = max(1, CHUNK_ELEMS // max(T, 1))
        for i in range(0, B, step):
            j = min(i + step, B)
            o = self.scorer.score_rows_(self.batch, i, out[i:j])
            torch.addcmul(self.C[i:j, None], o, self.A[i:j, None], out=o)
            torch.where(m[i:j], o, zero, out=o)
        dropped = (~self.rows).nonzero().squeeze(1)
        if dropped.numel():
            out[dropped] = 0.0
        return out


def _warn_zero_mean(step: int, who: str, stacklevel: int = 5) -> None:
    warnings.warn(
        f"step {step}: {who}: every raw weight in the normalization set is 0; "
        "weights left at 1 (mean 1 cannot be reached)",
        StrategyWarning,
        stacklevel=stacklevel,
    )
