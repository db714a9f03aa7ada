"""dataflex-rl: data strategies for RLVR/GRPO as configurable parts of one training loop.

Importing the package registers every built-in component once. Everything a user needs sits
here, in one import:

- **run a strategy in your own trainer**: `Strategy` (``decide(batch)`` -> `Decision`: keep
  mask, weights, the next draw's domain proportions), `RolloutBatch` (the batch it reads),
  `StrategySpec` / `parse_strategy`, `PRESETS`, `ConfigError`;
- **write a component** (docs/extending.md): the bases `Scorer`, `DomainScorer`, `Selector`,
  `Reweighter`, `Mixer`, `SkipPolicy`; `param` for hyperparameters; the registries
  `SCORERS`, `SELECTORS`, `REWEIGHTERS`, `MIXERS`, `SKIP_POLICIES` (``register(name, cls)``);
  `PromptHistory` (what a skip policy reads); `from_lists` (a small batch for tests);
- **vectorized helpers** a component computes with: per-batch `clean_rewards`,
  `informative_mask`, `group_successes`, `rank_in_group`, `group_domain`; per-segment
  `segment_sum`, `segment_count`, `segment_max`, `segment_min`; per-row reductions of [B, T]
  tensors under a mask `masked_row_sums`, `masked_row_means`;
- **tasks**: `build_taskset`, the built-in domains (generators and their 0/1 verifiers) that
  examples/minimal_grpo.py trains on.
"""

from dataflex_rl import mix, prerollout, reweight, scorers, select  # noqa: F401  (registers)
from dataflex_rl.core.base import (
    MIXERS,
    REWEIGHTERS,
    SCORERS,
    SELECTORS,
    SKIP_POLICIES,
    DomainScorer,
    Mixer,
    Reweighter,
    Scorer,
    Selector,
    SkipPolicy,
)
from dataflex_rl.core.batch import (
    RolloutBatch,
    clean_rewards,
    from_lists,
    group_domain,
    group_successes,
    informative_mask,
    rank_in_group,
)
from dataflex_rl.core.config import param
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError, Registry
from dataflex_rl.core.rowops import masked_row_means, masked_row_sums
from dataflex_rl.core.segment import segment_count, segment_max, segment_min, segment_sum
from dataflex_rl.core.spec import StrategySpec, parse_strategy
from dataflex_rl.core.strategy import Decision, Strategy
from dataflex_rl.presets import PRESETS  # registers the presets into core's table
from dataflex_rl.tasks import build_taskset

__version__ = "0.1.0"
__all__ = [
    # running a strategy
    "Strategy",
    "Decision",
    "RolloutBatch",
    "StrategySpec",
    "parse_strategy",
    "PRESETS",
    "ConfigError",
    # writing a component
    "Scorer",
    "DomainScorer",
    "Selector",
    "Reweighter",
    "Mixer",
    "SkipPolicy",
    "param",
    "Registry",
    "SCORERS",
    "SELECTORS",
    "REWEIGHTERS",
    "MIXERS",
    "SKIP_POLICIES",
    "PromptHistory",
    "from_lists",
    # vectorized helpers
    "clean_rewards",
    "informative_mask",
    "group_successes",
    "rank_in_group",
    "group_domain",
    "segment_sum",
    "segment_count",
    "segment_max",
    "segment_min",
    "masked_row_sums",
    "masked_row_means",
    # tasks
    "build_taskset",
    "__version__",
]
