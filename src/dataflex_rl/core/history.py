"""Per-prompt history of group outcomes (bounded, tensor-backed, saved with checkpoints)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch, group_successes
from dataflex_rl.core.segment import segment_min, segment_sum

_FIELDS = ("step", "solve", "zero", "tokens", "responses")
_DTYPES = {
    "step": torch.int64,
    "solve": torch.float64,
    "zero": torch.bool,
    "tokens": torch.int64,
    "responses": torch.int64,
}


class Outcomes(NamedTuple):
    """The remembered outcomes of N prompts, newest in the last column.

    Each field is [N, size]; column ``size - 1`` holds the newest outcome and only the last
    ``count`` columns of a row are filled (``valid``). Unseen prompts have count 0.
    """

    step: Tensor
    solve: Tensor
    zero: Tensor
    tokens: Tensor
    responses: Tensor
    count: Tensor

    @property
    def valid(self) -> Tensor:
        """[N, size] bool: the filled columns of each row."""
        size = self.step.shape[1]
        return torch.arange(size) >= (size - self.count)[:, None]

    def mean_tokens(self) -> Tensor:
        """[N] float64 mean response tokens per remembered group (NaN for unseen prompts)."""
        total = (self.tokens * self.valid).sum(1).to(torch.float64)
        return total / self.count.to(torch.float64)  # 0/0 -> NaN for unseen prompts


class PromptHistory:
    """The last ``size`` group outcomes of every prompt seen.

    Each outcome is ``(step, solve_rate, zero_variance, tokens)``: the training step, the
    share of rewards > 0.5, whether all rewards were equal, and the group's response tokens
    (`outcomes` also gives ``responses``). Each prompt key gets a row of [size] tensors, so
    reading thousands of candidates is one gather.
    """

    def __init__(self, size: int = 4) -> None:
        if int(size) < 1:
            raise ValueError(f"history_size must be >= 1, got {size}")
        self.size = int(size)
        #: bumped by every `load_state_dict`: rows read before it may name other prompts
        self.version = 0
        self._slot: dict[Hashable, int] = {}
        self._keys: list = []
        self._data = {f: torch.zeros(0, self.size, dtype=_DTYPES[f]) for f in _FIELDS}
        self._count = torch.zeros(0, dtype=torch.int64)

    # ------------------------------------------------------------------ reading
    def slots(self, keys: Sequence) -> Tensor:
        """[N] int64 row of each key (-1 for a prompt never seen)."""
        get = self._slot.get
        return torch.tensor([get(k, -1) for k in keys], dtype=torch.int64)

    def outcomes(self, keys: Sequence) -> Outcomes:
        """The remembered outcomes of ``keys`` (unseen prompts: count 0)."""
        return self.rows(self.slots(keys))

    def rows(self, slots: Tensor) -> Outcomes:
        """The remembered outcomes of the prompts in rows ``slots`` ([N] int64, -1: never
        seen; count 0), without a key lookup: a reader that maps its own prompts to rows
        once (`keys_from`) gathers thousands of them in one call."""
        seen = slots >= 0
        rows = slots.clamp(min=0)
        if len(self._keys) == 0:  # nothing to gather from
            n = len(slots)
            return Outcomes(
                *(torch.zeros(n, self.size, dtype=_DTYPES[f]) for f in _FIELDS),
                torch.zeros(n, dtype=torch.int64),
            )
        count = torch.where(seen, self._count[rows], torch.zeros_like(rows))
        return Outcomes(*(self._data[f][rows] for f in _FIELDS), count)

    def get(self, key) -> list[tuple[int, float, bool, int]]:
        """Outcomes of ``key``, oldest first (empty if never seen)."""
        row = self._slot.get(key)
        if row is None:
            return []
        n = int(self._count[row])
        cols = [self._data[f][row, self.size - n :].tolist() for f in _FIELDS[:4]]
        return [(int(s), float(v), bool(z), int(t)) for s, v, z, t in zip(*cols)]

    def mean_tokens(self, key) -> float | None:
        """Mean response tokens of ``key``'s remembered groups (None if never seen)."""
        if key not in self._slot:
            return None
        return float(self.outcomes([key]).mean_tokens()[0])

    def __len__(self) -> int:
        return len(self._keys)

    def keys_from(self, start: int) -> list:
        """The prompt keys of rows ``start`` on, in row order (a prompt keeps its row until
        `load_state_dict` replaces the contents, which bumps `version`)."""
        return self._keys[start:]

    # ------------------------------------------------------------------ writing
    def update(self, batch: RolloutBatch) -> None:
        """Record one outcome per group of ``batch`` (needs ``prompt_keys``).

        Groups are recorded in group-id order; a prompt with several groups in one batch
        gets one outcome per group.
        """
        if batch.prompt_keys is None or batch.batch_size == 0:
            return
        G = batch.num_groups
        size = batch.group_size
        present = size > 0
        if not bool(present.any()):
            return
        solve = group_successes(batch).to(torch.float64) / size.clamp(min=1)
        zero = batch.group_std == 0
        tokens = segment_sum(batch.response_length * batch.active_mask, batch.group_ids, G)
        first = segment_min(torch.arange(batch.batch_size), batch.group_ids, G, empty=0)
        groups = present.nonzero().squeeze(1)
        keys = batch.prompt_keys
        slots = self._assign([keys[r] for r in first[groups].tolist()])
        values = {
            "step": torch.full((len(groups),), int(batch.step), dtype=torch.int64),
            "solve": solve[groups],
            "zero": zero[groups],
            "tokens": tokens[groups].to(torch.int64),
            "responses": size[groups],
        }
        # a prompt may own several groups: write them in layers of distinct prompts
        order = torch.sort(slots, stable=True).indices
        s = slots[order]
        start = torch.ones_like(s, dtype=torch.bool)
        start[1:] = s[1:] != s[:-1]
        run_start = torch.cummax(torch.where(start, torch.arange(len(s)), 0), 0).values
        layer = torch.empty_like(s)
        layer[order] = torch.arange(len(s)) - run_start
        for k in range(int(layer.max()) + 1 if len(s) else 0):
            pick = layer == k
            self._append(slots[pick], {f: v[pick] for f, v in values.items()})

    def _assign(self, keys: list) -> Tensor:
        """Rows of ``keys``, creating rows for new prompts (one dict operation per key)."""
        slot = self._slot
        for k in keys:
            if k not in slot:
                slot[k] = len(self._keys)
                self._keys.append(k)
        need = len(self._keys)
        have = self._count.shape[0]
        if need > have:  # grow geometrically
            cap = max(need, 2 * have, 64)
            for f in _FIELDS:
                grown = torch.zeros(cap, self.size, dtype=_DTYPES[f])
                grown[:have] = self._data[f]
                self._data[f] = grown
            count = torch.zeros(cap, dtype=torch.int64)
            count[:have] = self._count
            self._count = count
        return torch.tensor([slot[k] for k in keys], dtype=torch.int64)

    def _append(self, rows: Tensor, values: dict[str, Tensor]) -> None:
        """Shift the rows ``rows`` (distinct) left by one and write the new outcome last."""
        for f in _FIELDS:
            block = self._data[f][rows]
            self._data[f][rows] = torch.cat(
                [block[:, 1:], values[f][:, None].to(block.dtype)], dim=1
            )
        self._count[rows] = (self._count[rows] + 1).clamp(max=self.size)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        n = len(self._keys)
        return {
            "format": 2,
            "size": self.size,
            "keys": list(self._keys),
            "count": self._count[:n].clone(),
            **{f: self._data[f][:n].clone() for f in _FIELDS},
        }

    def load_state_dict(self, state: dict) -> None:
        version = self.version + 1
        self._load(state)
        self.version = version

    def _load(self, state: dict) -> None:
        if "data" in state and "keys" not in state:  # format 1: {key: [outcome, ...]}
            self.__init__(int(state["size"]))
            for key, outcomes in state["data"].items():
                for step, solve, zero, tokens in outcomes:  # group sizes were not kept
                    row = int(self._assign([key])[0])
                    self._append(
                        torch.tensor([row]),
                        {
                            "step": torch.tensor([step]),
                            "solve": torch.tensor([solve]),
                            "zero": torch.tensor([bool(zero)]),
                            "tokens": torch.tensor([tokens]),
                            "responses": torch.tensor([0]),
                        },
                    )
            return
        self.size = int(state["size"])
        self._keys = list(state["keys"])
        self._slot = {k: i for i, k in enumerate(self._keys)}
        if len(self._slot) != len(self._keys):
            raise ValueError("prompt history state: duplicate prompt keys")
        self._count = state["count"].to(torch.int64).clone()
        self._data = {f: state[f].to(_DTYPES[f]).clone() for f in _FIELDS}
        n = len(self._keys)
        shapes = {f: tuple(self._data[f].shape) for f in _FIELDS}
        if tuple(self._count.shape) != (n,) or any(s != (n, self.size) for s in shapes.values()):
            raise ValueError(
                f"prompt history state: {n} keys, size {self.size}, but count "
                f"{tuple(self._count.shape)} and fields {shapes}"
            )
