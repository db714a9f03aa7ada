"""The layout of TRL's generation rows across a step's generations (refill rounds).

Every rank generates an equal share of each round's prompts with TRL's own generation; the
rounds' rows are gathered and the groups `Driver.step` assembled are taken out the same way
on every rank (`dataflex_rl.hosts.common.step.assemble_groups` decides which). Text only.
Needs no TRL.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: the output fields a refill knows how to assemble (rows first; prompt fields left-padded)
ROW_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
)
#: fields recomputed after assembly
OTHER_FIELDS = ("num_items_in_batch",)
LEFT_PADDED = ("prompt_ids", "prompt_mask")


def check_refillable(out: dict) -> None:
    """Refuse a generation output this host cannot reassemble (images, tool masks, ...).

    Raises:
        ValueError: naming the fields.
    """
    other = sorted(set(out) - set(ROW_FIELDS) - set(OTHER_FIELDS))
    if other:
        raise ValueError(
            f"dataflex.strategy.refill: TRL's generation carries {other}, which the TRL host "
            "cannot reassemble after refill rounds (text-only generations); drop 'refill' "
            "for this run"
        )


def cpu_rows(out: dict) -> dict[str, Tensor]:
    """The row fields of a rank's generation output, on the CPU."""
    return {k: out[k].detach().cpu() for k in ROW_FIELDS if out.get(k) is not None}


def cat_rows(parts: Sequence[dict[str, Tensor]], pad_id: int) -> dict[str, Tensor]:
    """Concatenate row dicts in order: prompt fields left-padded (ids with ``pad_id``), the
    others right-padded (ids with ``pad_id``, the rest with 0)."""
    out: dict[str, Tensor] = {}
    for key in parts[0]:
        tensors = [p[key] for p in parts]
        if tensors[0].dim() == 1:
            out[key] = torch.cat(tensors)
            continue
        width = max(t.shape[1] for t in tensors)
        value = pad_id if key in ("prompt_ids", "completion_ids") else 0
        left = key in LEFT_PADDED
        out[key] = torch.cat(
            [
                torch.nn.functional.pad(
                    t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]), value=value
                )
                for t in tensors
            ]
        )
    return out


def take(rows: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
    """The rows ``index`` of every field."""
    return {k: v.index_select(0, index) for k, v in rows.items()}
