"""dataflex-rl: data strategies for RLVR/GRPO as configurable parts of one training loop.

Importing the package registers every built-in component once.
"""

from dataflex_rl import mix, prerollout, reweight, scorers, select  # noqa: F401  (registers)
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.registry import ConfigError, Registry
from dataflex_rl.core.spec import StrategySpec, parse_strategy
from dataflex_rl.core.strategy import Decision, Strategy
from dataflex_rl.presets import PRESETS  # registers the presets into core's table

__version__ = "0.1.0"
__all__ = [
    "RolloutBatch",
    "Strategy",
    "StrategySpec",
    "Decision",
    "ConfigError",
    "Registry",
    "PRESETS",
    "parse_strategy",
    "__version__",
]
