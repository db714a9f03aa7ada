"""`RolloutBatch`: the data contract between hosts (engine, verl) and strategies.

B responses, T response tokens (right-padded), G prompt groups, D domains. A batch is a frozen,
validated view; group statistics are computed on demand with vectorized segment ops and cached.

Rows that never take part in anything:

* padding rows (``is_padding``), which hosts add to balance batches;
* rows whose reward is NaN or infinite (a broken verifier), or whose advantages or old
  log-probs are non-finite on a valid token: they are treated exactly like padding (never
  kept, weight 0, not counted in group statistics) and counted in the metrics
  ``dataflex/invalid_responses`` (and ``dataflex/invalid_reward_responses`` for rewards).
  The remaining *active* rows are ``active_mask``.

Validation is in two tiers. Shapes, dtypes, ids and the mask's values are checked when the
batch is built (cheap: no [B, T] float tensor is read). What needs a pass over a token tensor
-- "has a non-finite value on a valid token" for ``advantages`` and ``old_log_probs``, the
agreement of ``response_lengths`` with the mask -- is checked lazily, on the first read that
needs it, once (cached). A strategy hands its components `RolloutBatch.reading` (only the
optional fields they declare), so a decision never reads, and never pays for, a field it does
not use: a non-finite ``old_log_probs`` row makes its row invalid only for decisions that read
``old_log_probs``.

Hosts whose advantages are one value per response (outcome rewards, GRPO-like estimators) and
who know the response lengths can also pass ``response_advantages`` [B] and
``response_lengths`` [B]: every per-response quantity (lengths, mean advantage, |advantage|
scores, informative rows, the invalid-row check of advantages) is then computed from these B
values, and a response- or group-level decision reads no [B, T] tensor at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dataflex_rl.core.rowops import TokenBlocks, exact_prob_rows, nonfinite_rows_from_sums
from dataflex_rl.core.segment import (
    SegmentTable,
    lexsort,
    rank_in_segment,
    segment_count,
    segment_min,
    segment_moments,
    segment_table,
)

if TYPE_CHECKING:
    from dataflex_rl.core.native import TokenKernels

#: caches `RolloutBatch.reading` and `with_kernels` keep: they hold no float sum (exact on every
#: path) and depend on no per-token field a decision may leave out
_EXACT_CACHES = (
    "token_blocks",
    "invalid_reward_mask",
    "response_length",
    "group_layout",
    "prefix_lengths",
)

#: Absolute advantage below which a response counts as carrying no learning signal.
ZERO_ADVANTAGE_EPS = 1e-8


class BatchError(ValueError):
    """A `RolloutBatch` field has the wrong shape, dtype or content."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise BatchError(msg)


#: the tensor fields of a `RolloutBatch`
TENSOR_FIELDS = (
    "rewards",
    "response_mask",
    "group_ids",
    "domain_ids",
    "advantages",
    "old_log_probs",
    "is_padding",
    "response_advantages",
    "response_lengths",
)


def check_tensor_devices(batch) -> None:
    """Raise `BatchError` for a meta tensor (it has no data) or for fields on different
    devices, naming the fields; before anything reads a value."""
    devices = {}
    for name in TENSOR_FIELDS:
        t = getattr(batch, name, None)
        if isinstance(t, Tensor):
            if t.is_meta:
                raise BatchError(
                    f"{name} is a meta tensor (a shape without data, e.g. from a model built "
                    "on the 'meta' device); move real values to a device (.to('cpu') or "
                    ".to('cuda')) before building the RolloutBatch"
                )
            devices[name] = t.device
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise BatchError(f"RolloutBatch fields must be on one device, got {where}")


def _describe(x) -> str:
    if isinstance(x, Tensor):
        return f"{x.dtype} {tuple(x.shape)}"
    return type(x).__name__


#: the optional per-token tensors a decision reads only when one of its components declares
#: them (`RolloutBatch.reading`)
TOKEN_FIELDS = ("advantages", "old_log_probs")


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """One training batch as strategies see it.

    Args:
        rewards: [B] float outcome reward per response (NaN/inf allowed, see module doc).
        response_mask: [B, T] bool, valid response tokens.
        group_ids: [B] int64, dense prompt-group ids ``0..G-1``.
        domain_ids: [B] int64, dense domain ids ``0..D-1``; ``None`` means one domain.
        domains: names of the D domains, in id order.
        advantages: [B, T] float token advantages, after the host's advantage computation.
        old_log_probs: [B, T] float log-prob of each sampled token under the sampling policy.
        prompt_keys: B stable prompt identities (str or int) for per-prompt histories.
        is_padding: [B] bool, padding rows; ``None`` means no padding.
        step: global training step.
        response_advantages: [B] float, optional: each response's advantage when the host's
            advantages are constant over its valid tokens. When given, per-response reads
            use it and never read ``advantages`` (which the host keeps for its loss; it may
            be None). The host vouches that the two agree: checking would cost the read it saves.
        response_lengths: [B] int64, optional: each response's number of valid tokens. When
            given, ``response_length`` is this tensor; it is checked against
            ``response_mask`` lazily, the first time the mask summary (`token_blocks`) is
            built.
    """

    rewards: Tensor
    response_mask: Tensor
    group_ids: Tensor
    domain_ids: Tensor | None = None
    domains: tuple[str, ...] = ("default",)
    advantages: Tensor | None = None
    old_log_probs: Tensor | None = None
    prompt_keys: tuple | None = None
    is_padding: Tensor | None = None
    step: int = 0
    response_advantages: Tensor | None = None
    response_lengths: Tensor | None = None
    _num_groups: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        check_tensor_devices(self)
        set_ = object.__setattr__
        r, m, g = self.rewards, self.response_mask, self.group_ids
        _check(isinstance(r, Tensor) and r.dim() == 1, "rewards must be a 1-D tensor [B]")
        _check(r.is_floating_point(), f"rewards must be float, got {r.dtype}")
        B = r.shape[0]
        _check(
            isinstance(m, Tensor) and m.dim() == 2 and m.shape[0] == B,
            f"response_mask must be [B, T] with B={B}, got {tuple(getattr(m, 'shape', ()))}",
        )
        if m.dtype != torch.bool:
            _check(bool(((m == 0) | (m == 1)).all()), "response_mask must be bool or 0/1")
            set_(self, "response_mask", m.bool())
        _check(
            isinstance(g, Tensor) and g.dim() == 1 and g.shape[0] == B,
            f"group_ids must be [B] with B={B}",
        )
        _check(g.dtype == torch.int64, f"group_ids must be int64, got {g.dtype}")
        G = int(g.max()) + 1 if B else 0
        _check(B == 0 or int(g.min()) >= 0, "group_ids must be >= 0")
        _check(
            B == 0 or bool((torch.bincount(g, minlength=G) > 0).all()),
            "group_ids must be dense 0..G-1 (factorize your uids first)",
        )
        set_(self, "_num_groups", G)
        domains = tuple(self.domains)
        _check(
            len(domains) > 0 and len(set(domains)) == len(domains),
            f"domains must be non-empty and unique, got {domains}",
        )
        set_(self, "domains", domains)
        if self.domain_ids is None:
            _check(len(domains) == 1, "domain_ids is required when there is more than one domain")
            set_(self, "domain_ids", torch.zeros(B, dtype=torch.int64, device=r.device))
        d = self.domain_ids
        _check(
            d.dim() == 1 and d.shape[0] == B and d.dtype == torch.int64,
            "domain_ids must be int64 [B]",
        )
        _check(
            B == 0 or (int(d.min()) >= 0 and int(d.max()) < len(domains)),
            f"domain_ids must lie in 0..{len(domains) - 1}",
        )
        for name in ("advantages", "old_log_probs"):
            t = getattr(self, name)
            if t is not None:
                _check(
                    t.shape == m.shape,
                    f"{name} must have shape {tuple(m.shape)}, got {tuple(t.shape)}",
                )
                _check(t.is_floating_point(), f"{name} must be float")
        if self.is_padding is None:
            set_(self, "is_padding", torch.zeros(B, dtype=torch.bool, device=r.device))
        p = self.is_padding
        _check(p.shape == (B,) and p.dtype == torch.bool, "is_padding must be bool [B]")
        if self.prompt_keys is not None:
            keys = tuple(self.prompt_keys)
            _check(len(keys) == B, f"prompt_keys must have B={B} entries, got {len(keys)}")
            set_(self, "prompt_keys", keys)
        _check(isinstance(self.step, int) and self.step >= 0, "step must be an int >= 0")
        a = self.response_advantages
        if a is not None:
            _check(
                isinstance(a, Tensor) and a.shape == (B,) and a.is_floating_point(),
                f"response_advantages must be a float tensor [B] with B={B}, got {_describe(a)}",
            )
        n = self.response_lengths
        if n is not None:
            _check(
                isinstance(n, Tensor) and n.shape == (B,) and n.dtype == torch.int64,
                f"response_lengths must be an int64 tensor [B] with B={B}, got {_describe(n)}",
            )
            _check(
                B == 0 or (int(n.min()) >= 0 and int(n.max()) <= m.shape[1]),
                f"response_lengths must lie in 0..T={m.shape[1]}",
            )

    # ------------------------------------------------------------------ sizes
    @property
    def batch_size(self) -> int:
        """B, the number of rows (padding included)."""
        return int(self.rewards.shape[0])

    @property
    def num_groups(self) -> int:
        """G."""
        return self._num_groups

    @property
    def num_domains(self) -> int:
        """D."""
        return len(self.domains)

    def replace(self, **changes) -> RolloutBatch:
        """A copy with some fields replaced (validated again).

        The mask summary (`token_blocks`) carries over when ``response_mask`` is unchanged,
        the pass over ``old_log_probs`` when neither it nor the mask changes, the group layout
        when ``group_ids`` is unchanged.
        """
        changes.setdefault("_num_groups", -1)
        new = dataclasses.replace(self, **changes)
        if "_kernels" in self.__dict__:
            new.__dict__["_kernels"] = self.__dict__["_kernels"]
        if "group_ids" not in changes and "group_layout" in self.__dict__:
            new.__dict__["group_layout"] = self.group_layout
        same_tokens = "response_mask" not in changes and "old_log_probs" not in changes
        if same_tokens and "_old_log_prob_pass" in self.__dict__:
            new.__dict__["_old_log_prob_pass"] = self._old_log_prob_pass
        if (
            "response_mask" not in changes
            and "response_lengths" not in changes
            and "token_blocks" in self.__dict__
        ):
            new.__dict__["token_blocks"] = self.token_blocks
        if (
            "response_mask" not in changes
            and "response_lengths" not in changes
            and "prefix_lengths" in self.__dict__
        ):
            new.__dict__["prefix_lengths"] = self.prefix_lengths
        return new

    def reading(self, fields: Sequence[str]) -> RolloutBatch:
        """This batch as a decision that reads only ``fields`` sees it.

        The per-token tensors of `TOKEN_FIELDS` not named in ``fields`` are left out (None),
        so nothing reads them, validates them or pays for them: their non-finite values make
        no row invalid here. Every other field is shared, not copied or validated again, and
        so are the caches that do not depend on a left-out field. Returns ``self`` when
        nothing is left out.
        """
        drop = [f for f in TOKEN_FIELDS if f not in fields and getattr(self, f) is not None]
        if not drop:
            return self
        new = object.__new__(type(self))
        for f in dataclasses.fields(self):
            new.__dict__[f.name] = None if f.name in drop else self.__dict__[f.name]
        for key in (*_EXACT_CACHES, "_kernels"):
            if key in self.__dict__:
                new.__dict__[key] = self.__dict__[key]
        return new

    def with_kernels(self, kernels: TokenKernels | None) -> RolloutBatch:
        """This batch, with its passes over ``old_log_probs`` done by compiled ``kernels``
        (`core.native`) where they apply: CPU, contiguous float32 log-probs and right-padded
        rows (`TokenBlocks.prefix_lengths`); torch otherwise. Results agree with torch's to
        ~2e-7 relative. Returns ``self`` when ``kernels`` is None; the caches that hold no
        float sum are shared."""
        if kernels is None:
            return self
        new = object.__new__(type(self))
        for f in dataclasses.fields(self):
            new.__dict__[f.name] = self.__dict__[f.name]
        # only the caches that do not hold a sum: the kernels redo the sums, so a decision
        # does not depend on what the host read before
        for key in _EXACT_CACHES:
            if key in self.__dict__:
                new.__dict__[key] = self.__dict__[key]
        new.__dict__["_kernels"] = kernels
        return new

    @property
    def token_kernels(self) -> TokenKernels | None:
        """The kernels of `with_kernels` when they apply to this batch's ``old_log_probs``
        and mask, else None."""
        if self._kernel_lengths(self.old_log_probs) is None:
            return None
        return self.__dict__["_kernels"]

    @cached_property
    def prefix_lengths(self) -> Tensor | None:
        """[B] int64 valid tokens per row when every row is right-padded (its valid tokens
        first: what the kernels of `with_kernels` need), else None. With kernels, one pass
        over the mask in C that also checks ``response_lengths`` (no block summary);
        otherwise `TokenBlocks.prefix_lengths`."""
        k = self.__dict__.get("_kernels")
        m = self.response_mask
        if k is None or "token_blocks" in self.__dict__ or m.device.type != "cpu":
            return self.token_blocks.prefix_lengths
        n = k.prefix_lengths(m)
        given = self.response_lengths
        if n is not None and given is not None and not torch.equal(n, given):
            row = int((n != given).nonzero()[0, 0])
            raise BatchError(
                f"response_lengths disagrees with response_mask: row {row} has length "
                f"{int(given[row])} but {int(n[row])} valid tokens in the mask"
            )
        return n

    # ------------------------------------------------------------------ masks
    @cached_property
    def invalid_reward_mask(self) -> Tensor:
        """[B] bool: non-padding rows whose reward is NaN or infinite."""
        return ~self.is_padding & ~_finite(self.rewards)

    @cached_property
    def invalid_mask(self) -> Tensor:
        """[B] bool: non-padding rows with a non-finite reward, or a non-finite advantage or
        old log-prob on a valid token. Such rows are treated exactly like padding."""
        bad = None
        if self.response_advantages is not None:  # B values stand for the advantages
            bad = ~_finite(self.response_advantages) & (self.response_length > 0)
        elif self.advantages is not None:
            # (no block summary: the kernels' sums need only the mask's rows it flags)
            bad = nonfinite_rows_from_sums(
                self.advantages, self.response_mask, self._advantage_row_sums
            )
        if self.old_log_probs is not None:
            lp = self._old_log_prob_pass[0]
            bad = lp if bad is None else bad | lp
        if bad is None:
            return self.invalid_reward_mask
        return self.invalid_reward_mask | (~self.is_padding & bad)

    @cached_property
    def _old_log_prob_pass(self) -> tuple[Tensor, Tensor, Tensor]:
        """One read of ``old_log_probs`` (`TokenBlocks.prob_row_sums`, a chunk of rows at a
        time): ([B] bool, a non-finite value on a valid token; [B] float64,
        `token_prob_sums`; [k] `token_prob_odd_rows`)."""
        x = self.old_log_probs.detach()
        kernels = self.token_kernels
        if kernels is None:
            mass, bad, odd = self.token_blocks.prob_row_sums(x)
            return bad, mass.to(torch.float64), odd
        mass, odd_mask = kernels.prob_row_sums(x, self.prefix_lengths)
        bad = torch.zeros_like(odd_mask)
        odd = odd_mask.nonzero().squeeze(1)
        if odd.numel():
            sums, bad_rows = exact_prob_rows(x, self.response_mask, odd)
            mass[odd] = sums.to(torch.float64)
            bad[odd] = bad_rows
        return bad, mass, odd

    @property
    def token_prob_odd_rows(self) -> Tensor:
        """[k] int64 ascending: the rows where exp(old_log_prob) may differ from the sampling
        probability exp(min(old_log_prob, 0)) on some token (a value > 0, a NaN, an infinity,
        or one so small that exp underflows to 0; from the pass of `token_prob_sums`). On
        every other row p = exp(old_log_prob) exactly, with no clamp."""
        _check(self.old_log_probs is not None, "this needs 'old_log_probs', which the batch lacks")
        return self._old_log_prob_pass[2]

    @property
    def token_prob_sums(self) -> Tensor:
        """[B] float64: sum over each row's valid tokens of the sampling probability
        p_t = exp(min(old_log_prob_t, 0)), from the same pass as the validity check of
        ``old_log_probs`` (NaN for a row with a NaN on a valid token)."""
        _check(self.old_log_probs is not None, "this needs 'old_log_probs', which the batch lacks")
        return self._old_log_prob_pass[1]

    @cached_property
    def token_blocks(self) -> TokenBlocks:
        """Block summary of ``response_mask`` for fast per-row token reductions.

        Built on first use (one pass over the mask); checks ``response_lengths``, when given,
        against the mask's row counts.
        """
        blocks = TokenBlocks(self.response_mask)
        n = self.response_lengths
        if n is not None and not torch.equal(blocks.row_counts, n):
            row = int((blocks.row_counts != n).nonzero()[0, 0])
            raise BatchError(
                f"response_lengths disagrees with response_mask: row {row} has length "
                f"{int(n[row])} but {int(blocks.row_counts[row])} valid tokens in the mask"
            )
        return blocks

    @cached_property
    def _advantage_row_sums(self) -> Tensor:
        """[B] sum of the advantages over each row's valid tokens (one pass, shared by the
        validity check and `advantage_per_response`); with kernels, over each row's valid
        tokens only."""
        n = self._kernel_lengths(self.advantages)
        if n is not None:
            return self.__dict__["_kernels"].row_sums(self.advantages.detach(), n)
        return self.token_blocks.row_sums(self.advantages)

    def _kernel_lengths(self, x: Tensor | None) -> Tensor | None:
        """The row lengths when `with_kernels` kernels apply to ``x`` (CPU contiguous float32,
        right-padded rows), else None."""
        k = self.__dict__.get("_kernels")
        if k is None or not k.supports(x):
            return None
        return self.prefix_lengths

    @property
    def has_advantages(self) -> bool:
        """Whether the batch carries advantages (per token or per response)."""
        return self.advantages is not None or self.response_advantages is not None

    @cached_property
    def _log_prob_row_sums(self) -> Tensor:
        """[B] sum of the old log-probs over each row's valid tokens (shared by the validity
        check and `log_prob_per_response`)."""
        return self.token_blocks.row_sums(self.old_log_probs)

    @cached_property
    def active_mask(self) -> Tensor:
        """[B] bool: rows that take part (not padding, not invalid)."""
        return ~self.is_padding & ~self.invalid_mask

    @cached_property
    def clean_rewards(self) -> Tensor:
        """[B] rewards with inactive rows set to 0 (safe for arithmetic)."""
        return torch.where(self.active_mask, self.rewards, torch.zeros_like(self.rewards))

    @cached_property
    def token_mask(self) -> Tensor:
        """[B, T] bool: valid tokens of active rows."""
        return self.response_mask & self.active_mask[:, None]

    @cached_property
    def response_length(self) -> Tensor:
        """[B] int64 number of valid response tokens (``response_lengths`` when given: no
        read of the mask)."""
        if self.response_lengths is not None:
            return self.response_lengths
        if "_kernels" in self.__dict__ and (n := self.prefix_lengths) is not None:
            return n  # the kernels' pass over the mask: no block summary
        return self.token_blocks.row_counts

    @cached_property
    def advantage_per_response(self) -> Tensor:
        """[B] mean token advantage over valid tokens (0 where none or inactive).

        ``response_advantages`` when given (no [B, T] read).
        """
        _check(self.has_advantages, "this needs 'advantages', which the batch lacks")
        if self.response_advantages is not None:
            a = self.response_advantages
            return torch.where(
                self.active_mask & (self.response_length > 0), a, torch.zeros_like(a)
            )
        s = self._advantage_row_sums
        mean = s / self.response_length.clamp(min=1)
        return torch.where(self.active_mask, mean, 0.0)

    @cached_property
    def log_prob_per_response(self) -> Tensor:
        """[B] mean old log-prob over valid tokens (0 where none or inactive)."""
        _check(self.old_log_probs is not None, "this needs 'old_log_probs', which the batch lacks")
        mean = self._log_prob_row_sums / self.response_length.clamp(min=1)
        return torch.where(self.active_mask, mean, 0.0)

    @cached_property
    def informative_mask(self) -> Tensor:
        """[B] bool: active rows with a learning signal.

        With advantages: |mean token advantage| > eps. Without: the row's group has two
        different rewards (``group_std > 0``, exact: see `segment_moments`).
        """
        if self.has_advantages:
            return self.active_mask & (self.advantage_per_response.abs() > ZERO_ADVANTAGE_EPS)
        return self.active_mask & (self.group_std > 0).index_select(0, self.group_ids)

    # ------------------------------------------------------------------ group statistics
    @cached_property
    def group_layout(self) -> SegmentTable | None:
        """The rows as a [G, largest group] table (`segment_table`), or None when the groups
        are not listed one after another (up to a short tail of appended rows) or their sizes
        differ too much. Group-wise sorts and statistics use it (``max_variance``, ``gfpo``,
        recomputed advantages).

        Padding rows at the end of the batch (as hosts append them) are left out: they never
        take part, and without them G groups of n rows fill a [G, n] table exactly (its
        cells are the rows themselves, see `SegmentTable`)."""
        B = self.batch_size
        n_pad = int(self.is_padding.sum()) if B else 0
        covered = B - n_pad if n_pad and bool(self.is_padding[B - n_pad :].all()) else B
        return segment_table(self.group_ids, self.num_groups, covered)

    @cached_property
    def group_size(self) -> Tensor:
        """[G] int64 number of active responses per group."""
        return segment_count(self.active_mask, self.group_ids, self.num_groups)

    def group_successes(self, threshold: float = 0.5) -> Tensor:
        """[G] int64 number of active responses with reward > ``threshold``."""
        ok = self.active_mask & (self.clean_rewards > threshold)
        return segment_count(ok, self.group_ids, self.num_groups)

    @cached_property
    def _group_moments(self) -> tuple[Tensor, Tensor]:
        mean, std, _ = segment_moments(
            self.rewards, self.group_ids, self.num_groups, self.active_mask
        )
        return mean, std

    @property
    def group_mean(self) -> Tensor:
        """[G] float64 mean reward over active responses (0 for empty groups).

        Computed by `segment_moments` (float64; exactly the common value for a constant group).
        """
        return self._group_moments[0]

    @property
    def group_std(self) -> Tensor:
        """[G] float64 unbiased reward std over active responses (0 for groups of size < 2).

        Unbiased (n-1) like ``torch.std`` and verl's GRPO advantage. Exactly 0 if and only if
        the group's active rewards are all equal (the rule of `segment_moments`).
        """
        return self._group_moments[1]

    @cached_property
    def rank_in_group(self) -> Tensor:
        """[B] int64 rank of each reward in its group, ascending (0 = lowest), ties by index.

        Inactive rows are ranked after every active row of their group.
        """
        key = torch.where(
            self.active_mask, self.clean_rewards, torch.full_like(self.clean_rewards, float("inf"))
        )
        inactive_last = (~self.active_mask).to(torch.int8)
        order = lexsort(key, inactive_last, self.group_ids)
        return rank_in_segment(order, self.group_ids, self.num_groups)

    @cached_property
    def group_domain(self) -> Tensor:
        """[G] int64 domain of each group (of its first row)."""
        layout = self.__dict__.get("group_layout")  # when built: no scatter needed
        if layout is not None and layout.identity:  # group g's first row is row g * width
            return self.domain_ids[: layout.covered : layout.width]
        idx = torch.arange(self.batch_size, device=self.group_ids.device)
        first = segment_min(idx, self.group_ids, self.num_groups, empty=0)
        return self.domain_ids[first]


def _finite(x: Tensor) -> Tensor:
    """``torch.isfinite`` in two ops (|x| < inf is False for NaN and +-inf)."""
    return x.abs() < float("inf")


def from_lists(
    rewards: Sequence[float],
    group_ids: Sequence[int],
    lengths: Sequence[int] | None = None,
    *,
    advantages: Sequence[float] | None = None,
    **kwargs,
) -> RolloutBatch:
    """Build a small batch from Python lists (tests, docs, examples).

    ``lengths`` gives each response's token count (default 4); ``advantages`` gives one
    advantage per response, broadcast over its tokens.
    """
    r = torch.tensor(rewards, dtype=torch.float32)
    B = r.shape[0]
    lens = torch.tensor(lengths if lengths is not None else [4] * B, dtype=torch.int64)
    T = int(lens.max()) if B else 1
    mask = torch.arange(max(T, 1))[None, :] < lens[:, None]
    adv = None
    if advantages is not None:
        adv = torch.tensor(advantages, dtype=torch.float32)[:, None] * mask
    return RolloutBatch(
        rewards=r,
        response_mask=mask,
        group_ids=torch.tensor(group_ids, dtype=torch.int64).reshape(B),
        advantages=adv,
        **kwargs,
    )
