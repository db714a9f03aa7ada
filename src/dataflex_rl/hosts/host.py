"""What every host shares with the harness: where its settings hold what the controls change.

`HostControls` (a host's dotted paths for the sampling stream and the learning rate) and
`merge_overrides` (an arm's overrides merged into a host's settings).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass


@dataclass(frozen=True)
class HostControls:
    """Where a host's run settings (its ``run_config``) hold what the controls change: dotted
    paths, with the value the host uses when its settings leave one unset.

    Args:
        stream: the training sampling-noise stream (aa: another one).
        lr: the learning rate (no_update: 0; half_lr: half the experiment's).
        stream_default, lr_default: the host's values when the settings do not hold the key.
        section: how messages name the settings (``"trl."``: ``trl.noise_stream``).
    """

    stream: str
    lr: str
    stream_default: int = 0
    lr_default: float | None = None
    section: str = ""


def merge_overrides(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, nested mappings key by key (copies)."""
    out = copy.deepcopy(base)
    for k, v in overrides.items():
        out[k] = merge_overrides(out.get(k) or {}, v) if isinstance(v, dict) else copy.deepcopy(v)
    return out
