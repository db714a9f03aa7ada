"""The TRL host: dataflex strategies inside trl 1.16's ``GRPOTrainer``, without a fork.

``from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer``: the trainer
module (`dataflex_rl.hosts.trl.trainer`), which imports TRL, loads on first use; likewise
``DataflexAsyncGRPOConfig, DataflexAsyncGRPOTrainer`` (`async_trainer`: TRL's experimental
``AsyncGRPOTrainer``). Only this
package imports TRL; `config` (the ``dataflex`` block and the checks), `batch` (TRL's gathered
batch as a `RolloutBatch`) and `loss` (a `Decision` applied to TRL's generation output) need
no TRL, so the checks and ``describe`` work without it installed.
"""

from __future__ import annotations

_LAZY = frozenset({"DataflexGRPOConfig", "DataflexGRPOTrainer"})
#: TRL's experimental AsyncGRPOTrainer with a strategy (`async_trainer`), loaded on first use
_LAZY_ASYNC = frozenset({"DataflexAsyncGRPOConfig", "DataflexAsyncGRPOTrainer"})


def __getattr__(name: str):
    if name in _LAZY:
        from dataflex_rl.hosts.trl import trainer

        return getattr(trainer, name)
    if name in _LAZY_ASYNC:
        from dataflex_rl.hosts.trl import async_trainer

        return getattr(async_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
