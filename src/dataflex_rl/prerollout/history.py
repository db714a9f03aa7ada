"""Per-prompt history of group outcomes (bounded, saved with checkpoints)."""

from __future__ import annotations

from collections import deque

import torch

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.segment import segment_min, segment_sum


class PromptHistory:
    """The last ``size`` group outcomes of every prompt seen.

    Each outcome is ``(step, solve_rate, zero_variance, tokens)``: the training step, the
    group's fraction of responses with reward > 0.5, whether all its rewards were equal (no
    GRPO signal), and the group's total response tokens (used to estimate what skipping
    saves).
    """

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._data: dict = {}

    def update(self, batch: RolloutBatch) -> None:
        """Record one outcome per group of ``batch`` (needs ``prompt_keys``)."""
        if batch.prompt_keys is None or batch.batch_size == 0:
            return
        G = batch.num_groups
        size = batch.group_size
        solve = batch.group_successes().to(torch.float64) / size.clamp(min=1)
        zero_var = batch.group_std == 0
        tokens = segment_sum(batch.response_length * batch.active_mask, batch.group_ids, G)
        first = segment_min(torch.arange(batch.batch_size), batch.group_ids, G, empty=0)
        # bookkeeping into a dict keyed by prompt: one Python step per group (not a hot path)
        for g, row, n, s, z, t in zip(range(G), first.tolist(), size.tolist(), solve.tolist(),
                                      zero_var.tolist(), tokens.tolist()):
            if n == 0:
                continue
            key = batch.prompt_keys[row]
            self._data.setdefault(key, deque(maxlen=self.size)).append(
                (batch.step, s, bool(z), int(t)))

    def get(self, key) -> list[tuple[int, float, bool, int]]:
        """Outcomes of ``key``, oldest first (empty if never seen)."""
        return list(self._data.get(key, ()))

    def mean_tokens(self, key) -> float | None:
        """Mean response tokens of ``key``'s remembered groups (None if never seen)."""
        outcomes = self._data.get(key)
        if not outcomes:
            return None
        return sum(o[3] for o in outcomes) / len(outcomes)

    def __len__(self) -> int:
        return len(self._data)

    def state_dict(self) -> dict:
        return {"size": self.size, "data": {k: list(v) for k, v in self._data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.size = int(state["size"])
        self._data = {k: deque(map(tuple, v), maxlen=self.size) for k, v in state["data"].items()}
