"""`RolloutBatch`: the data contract between hosts (engine, verl, TRL) and strategies (see
docs/concepts.md#the-data-contract-rolloutbatch).

B responses, T response tokens (right-padded), G prompt groups, D domains. A batch is
immutable and validated when built (every [B, T] field too, a chunk of rows at a time); rows
that are padding or invalid (a non-finite reward, or a non-finite advantage, old log-prob or
entropy on a valid token) never take part. Derived values (informative rows, ranks, the group
table) are the functions at the bottom of this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from dataflex_rl.core.rowops import masked_row_sums, nonfinite_rows, row_counts
from dataflex_rl.core.segment import (
    SegmentTable,
    lexsort,
    rank_in_segment,
    segment_count,
    segment_min,
    segment_moments,
    segment_table,
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
    "entropies",
    "micro_batch_ids",
    "staleness",
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
TOKEN_FIELDS = ("advantages", "old_log_probs", "entropies")


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """One training batch as strategies see it.

    Args:
        rewards: [B] float outcome reward per response (NaN/inf: an invalid row).
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
            are constant over its valid tokens; per-response values then come from it and
            ``advantages`` is not read (the host vouches that they agree).
        response_lengths: [B] int64, optional: valid tokens per response (checked against
            ``response_mask`` only when the mask is read anyway).
        entropies: [B, T] float, optional: the entropy (nats) of the sampling distribution
            at each response token.
        micro_batch_ids: [B] int64 >= 0, optional: the loss micro-batch of each row, counted
            over processes (None: one, the whole batch).
        staleness: [B] int64 >= 0, optional: how many updates the policy has taken since the
            one that generated each row (asynchronous training; the same within a group;
            None: every row is on-policy, 0).

    Attributes (derived when the batch is built; `replace` derives them again):
        num_groups: G.
        response_length: [B] int64 valid tokens per row (``response_lengths`` when given).
        advantage_per_response: [B] mean token advantage over the valid tokens
            (``response_advantages`` when given), 0 where none or inactive; None without
            advantages.
        invalid_mask: [B] bool, non-padding rows with a non-finite reward, or a non-finite
            advantage, old log-prob or entropy on a valid token; treated exactly like padding.
        active_mask: [B] bool, the rows that take part: not padding, not invalid.
        group_size: [G] int64 active responses per group.
        group_mean: [G] float64 mean reward over the active responses (0 for empty groups).
        group_std: [G] float64 unbiased reward std over the active responses (0 for groups of
            size < 2); exactly 0 if and only if they are all equal (`segment_moments`).
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
    entropies: Tensor | None = None
    micro_batch_ids: Tensor | None = None
    staleness: Tensor | None = None
    num_groups: int = field(init=False, repr=False)
    response_length: Tensor = field(init=False, repr=False)
    advantage_per_response: Tensor | None = field(init=False, repr=False)
    invalid_mask: Tensor = field(init=False, repr=False)
    active_mask: Tensor = field(init=False, repr=False)
    group_size: Tensor = field(init=False, repr=False)
    group_mean: Tensor = field(init=False, repr=False)
    group_std: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_tensor_devices(self)
        self._check_fields()
        self._derive()

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def _check_fields(self) -> None:
        """Shapes, dtypes, ids and the mask's values (no [B, T] float tensor is read)."""
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
            self._set("response_mask", m.bool())
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
        self._set("num_groups", G)
        domains = tuple(self.domains)
        _check(
            len(domains) > 0 and len(set(domains)) == len(domains),
            f"domains must be non-empty and unique, got {domains}",
        )
        self._set("domains", domains)
        if self.domain_ids is None:
            _check(len(domains) == 1, "domain_ids is required when there is more than one domain")
            self._set("domain_ids", torch.zeros(B, dtype=torch.int64, device=r.device))
        d = self.domain_ids
        _check(
            d.dim() == 1 and d.shape[0] == B and d.dtype == torch.int64,
            "domain_ids must be int64 [B]",
        )
        _check(
            B == 0 or (int(d.min()) >= 0 and int(d.max()) < len(domains)),
            f"domain_ids must lie in 0..{len(domains) - 1}",
        )
        for name in TOKEN_FIELDS:
            t = getattr(self, name)
            if t is not None:
                _check(
                    t.shape == m.shape,
                    f"{name} must have shape {tuple(m.shape)}, got {tuple(t.shape)}",
                )
                _check(t.is_floating_point(), f"{name} must be float")
        if self.is_padding is None:
            self._set("is_padding", torch.zeros(B, dtype=torch.bool, device=r.device))
        p = self.is_padding
        _check(p.shape == (B,) and p.dtype == torch.bool, "is_padding must be bool [B]")
        if self.prompt_keys is not None:
            keys = tuple(self.prompt_keys)
            _check(len(keys) == B, f"prompt_keys must have B={B} entries, got {len(keys)}")
            self._set("prompt_keys", keys)
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
        mb = self.micro_batch_ids
        if mb is not None:
            _check(
                isinstance(mb, Tensor) and mb.shape == (B,) and mb.dtype == torch.int64,
                f"micro_batch_ids must be an int64 tensor [B] with B={B}, got {_describe(mb)}",
            )
            _check(B == 0 or int(mb.min()) >= 0, "micro_batch_ids must be >= 0")
        st = self.staleness
        if st is not None:
            _check(
                isinstance(st, Tensor) and st.shape == (B,) and st.dtype == torch.int64,
                f"staleness must be an int64 tensor [B] with B={B}, got {_describe(st)}",
            )
            _check(B == 0 or int(st.min()) >= 0, "staleness must be >= 0")

    def _derive(self) -> None:
        """The row and group facts (see the class doc), one pass over each per-token field."""
        m = self.response_mask
        token_adv = self.advantages if self.response_advantages is None else None
        reads_mask = (
            token_adv is not None or self.old_log_probs is not None or self.entropies is not None
        )
        n = self.response_lengths
        if n is None:
            n = row_counts(m)
        elif reads_mask:
            counts = row_counts(m)
            if not torch.equal(counts, n):
                row = int((counts != n).nonzero()[0, 0])
                raise BatchError(
                    f"response_lengths disagrees with response_mask: row {row} has length "
                    f"{int(n[row])} but {int(counts[row])} valid tokens in the mask"
                )
        self._set("response_length", n)
        bad = ~_finite(self.rewards)
        adv_sums = None
        if self.response_advantages is not None:  # B values stand for the advantages
            bad = bad | (~_finite(self.response_advantages) & (n > 0))
        elif token_adv is not None:
            adv_sums = masked_row_sums(token_adv.detach(), m)
            bad = bad | nonfinite_rows(token_adv, m, adv_sums)
        for name in ("old_log_probs", "entropies"):
            t = getattr(self, name)
            if t is not None:
                bad = bad | nonfinite_rows(t.detach(), m)
        invalid = ~self.is_padding & bad
        active = ~self.is_padding & ~invalid
        self._set("invalid_mask", invalid)
        self._set("active_mask", active)
        per_response = None
        if self.response_advantages is not None:
            a = self.response_advantages
            per_response = torch.where(active & (n > 0), a, torch.zeros_like(a))
        elif adv_sums is not None:
            per_response = torch.where(active, adv_sums / n.clamp(min=1), 0.0)
        self._set("advantage_per_response", per_response)
        G = self.num_groups
        mean, std, _ = segment_moments(self.rewards, self.group_ids, G, active)
        self._set("group_size", segment_count(active, self.group_ids, G))
        self._set("group_mean", mean)
        self._set("group_std", std)

    # ------------------------------------------------------------------ sizes
    @property
    def batch_size(self) -> int:
        """B, the number of rows (padding included)."""
        return int(self.rewards.shape[0])

    @property
    def num_domains(self) -> int:
        """D."""
        return len(self.domains)

    @property
    def has_advantages(self) -> bool:
        """Whether the batch carries advantages (per token or per response)."""
        return self.advantages is not None or self.response_advantages is not None

    def replace(self, **changes) -> RolloutBatch:
        """A copy with some fields replaced, validated and derived again."""
        return dataclasses.replace(self, **changes)

    def reading(self, fields: Sequence[str]) -> RolloutBatch:
        """This batch with the `TOKEN_FIELDS` not in ``fields`` left out (None), so their
        values invalidate no row; ``self`` when nothing is left out."""
        drop = {f: None for f in TOKEN_FIELDS if f not in fields and getattr(self, f) is not None}
        return self.replace(**drop) if drop else self


# ---------------------------------------------------------------------- derived values
def invalid_reward_mask(batch: RolloutBatch) -> Tensor:
    """[B] bool: non-padding rows whose reward is NaN or infinite."""
    return ~batch.is_padding & ~_finite(batch.rewards)


def clean_rewards(batch: RolloutBatch) -> Tensor:
    """[B] rewards with inactive rows set to 0 (safe for arithmetic)."""
    return torch.where(batch.active_mask, batch.rewards, torch.zeros_like(batch.rewards))


def token_mask(batch: RolloutBatch) -> Tensor:
    """[B, T] bool: valid tokens of active rows."""
    return batch.response_mask & batch.active_mask[:, None]


def informative_mask(batch: RolloutBatch) -> Tensor:
    """[B] bool: active rows with a learning signal: |mean token advantage| >
    `ZERO_ADVANTAGE_EPS`, or without advantages a group with two different rewards."""
    if batch.advantage_per_response is not None:
        return batch.active_mask & (batch.advantage_per_response.abs() > ZERO_ADVANTAGE_EPS)
    return batch.active_mask & (batch.group_std > 0).index_select(0, batch.group_ids)


def group_successes(batch: RolloutBatch, threshold: float = 0.5) -> Tensor:
    """[G] int64 number of active responses with reward > ``threshold``."""
    ok = batch.active_mask & (clean_rewards(batch) > threshold)
    return segment_count(ok, batch.group_ids, batch.num_groups)


def rank_in_group(batch: RolloutBatch) -> Tensor:
    """[B] int64 rank of each reward in its group, ascending (0 = lowest), ties by index;
    inactive rows after every active row of their group."""
    active = batch.active_mask
    key = torch.where(active, batch.rewards, torch.full_like(batch.rewards, float("inf")))
    order = lexsort(key, (~active).to(torch.int8), batch.group_ids)
    return rank_in_segment(order, batch.group_ids, batch.num_groups)


def group_layout(batch: RolloutBatch) -> SegmentTable | None:
    """The rows as a [G, largest group] table (`segment_table`; None when the groups are not
    listed in order or their sizes differ too much), trailing padding rows left out."""
    B = batch.batch_size
    pad = batch.is_padding
    n_pad = int(pad.sum()) if B else 0
    covered = B - n_pad if n_pad and bool(pad[B - n_pad :].all()) else B
    return segment_table(batch.group_ids, batch.num_groups, covered)


def group_domain(batch: RolloutBatch) -> Tensor:
    """[G] int64 domain of each group (of its first row)."""
    idx = torch.arange(batch.batch_size, device=batch.group_ids.device)
    first = segment_min(idx, batch.group_ids, batch.num_groups, empty=0)
    return batch.domain_ids[first]


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
    """Build a small batch from Python lists (tests, docs, examples): ``lengths`` tokens per
    response (default 4), one ``advantages`` value per response, broadcast over its tokens."""
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
