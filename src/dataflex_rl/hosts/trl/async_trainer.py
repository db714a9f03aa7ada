"""`DataflexAsyncGRPOTrainer`: TRL 1.16's experimental ``AsyncGRPOTrainer`` with a data strategy.

``AsyncGRPOTrainer`` trains on samples its rollout worker (a vLLM server by default) pushes onto
a queue; this subclass puts a `GroupGate` on that queue (`dataflex_rl.hosts.trl.async_gate`):
samples are buffered by group, whole groups go through the shared step (`Driver.step`: select,
reweight, refill from the queue, the decision log), each with its staleness, and only the
samples that stay in the loss reach TRL's ``RolloutQueueDataset``. A script changes its trainer
class and adds one block::

    args = DataflexAsyncGRPOConfig(..., dataflex={"strategy": "dapo"})
    trainer = DataflexAsyncGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

What cannot act here is refused before the model is built (`check_async`):
docs/hosts/trl.md#asynchronous-training-asyncgrpotrainer.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field

from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.trl.async_gate import GroupGate
from dataflex_rl.hosts.trl.config import async_host_settings, check_async, parse_block
from dataflex_rl.hosts.trl.trainer import DriverCheckpoints

logger = logging.getLogger("dataflex_rl.hosts.trl")


@dataclass
class DataflexAsyncGRPOConfig(AsyncGRPOConfig):
    """``AsyncGRPOConfig`` plus the ``dataflex`` block, checked when the config is built."""

    dataflex: dict | str | None = field(
        default=None,
        metadata={
            "help": "The dataflex block (strategy, decision_log, ...): a mapping or the path of "
            "a YAML file holding it. None: the 'baseline' strategy."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_async(parse_block(self.dataflex), self)  # errors now, naming the key


class DataflexAsyncGRPOTrainer(DriverCheckpoints, AsyncGRPOTrainer):
    """``AsyncGRPOTrainer`` plus a dataflex `Strategy`, run by a `Driver` on its rollout queue.

    ``dataflex``: the block (mapping or YAML path), when ``args`` is not a
    `DataflexAsyncGRPOConfig` or leaves it unset (not both). Checked before the model is built.
    """

    def __init__(self, *args, dataflex=None, **kwargs) -> None:
        bound = inspect.signature(AsyncGRPOTrainer.__init__).bind(None, *args, **kwargs).arguments
        grpo_args = bound.get("args")
        in_args = getattr(grpo_args, "dataflex", None)
        if dataflex is not None and in_args is not None:
            raise ConfigError(
                "dataflex: given both to DataflexAsyncGRPOTrainer(dataflex=...) and in "
                "args.dataflex; pass the block once"
            )
        self.dataflex = parse_block(dataflex if dataflex is not None else in_args)
        spec = check_async(
            self.dataflex,
            grpo_args,
            tools=bound.get("tools"),
            environment=bound.get("environment_factory"),
        )
        self.driver: Driver | None = None
        super().__init__(*args, **kwargs)
        G = self.args.num_generations
        samples = (
            self.args.per_device_train_batch_size
            * self.args.gradient_accumulation_steps
            * self.accelerator.num_processes
        )
        self.driver = Driver.for_dataset(
            self.dataflex,
            spec,
            async_host_settings(),
            None,
            self.args.output_dir,
            log_decisions=self.accelerator.is_main_process,
            settings={"trainer": "AsyncGRPOTrainer", "max_staleness": self.args.max_staleness},
        )
        self.gate = None
        if self.accelerator.is_main_process:
            adm = spec.admission
            self.gate = GroupGate(
                self.rollout_queue,
                self.driver,
                group_size=G,
                groups_per_update=samples // G,
                version=lambda: self.model_version,
                sink=self._metrics["train"],
                check_health=self.rollout_worker.check_health,
                stale_after_s=self.args.heartbeat_stale_after_s,
                max_staleness=self.args.max_staleness,
                admission=None if adm is None else int(adm.max_staleness),
            )
            # RolloutQueueDataset (get_train_dataloader) reads self.rollout_queue
            self.rollout_queue = self.gate
