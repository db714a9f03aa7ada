"""dataflex-rl: data strategies for RLVR/GRPO as configurable parts of one training loop.

Everything a user needs sits here, in one import. The names are imported on first use (PEP 562),
and the built-in components register themselves on a registry's first use, so importing the
package (or a torch-free part of it, such as ``report``) does not import torch:

- **run a strategy in your own trainer**: `Strategy` (``decide(batch)`` -> `Decision`: keep
  mask, weights, the loss's aggregation, the next draw's domain proportions), `RolloutBatch`
  (the batch it reads), `Driver` and `Intake` (the step every host runs: draw with mixing and
  pre-rollout skipping, refill, decide; examples/minimal_grpo.py), `StrategySpec` /
  `parse_strategy`, `PRESETS`, `ConfigError`;
- **write a component** (docs/extending.md): the bases `Scorer`, `DomainScorer`, `Selector`,
  `Reweighter`, `Mixer`, `SkipPolicy`, `Curriculum`; `param` for hyperparameters; the
  registries `SCORERS`, `SELECTORS`, `REWEIGHTERS`, `MIXERS`, `SKIP_POLICIES`, `CURRICULA`
  (``register(name, cls)``); `PromptHistory` (what a skip policy and a curriculum read); `from_lists` (a small batch for tests);
- **vectorized helpers** a component computes with: per-batch `clean_rewards`,
  `informative_mask`, `group_successes`, `rank_in_group`, `group_domain`; per-segment
  `segment_sum`, `segment_count`, `segment_max`, `segment_min`; per-row reductions of [B, T]
  tensors under a mask `masked_row_sums`, `masked_row_means`;
- **tasks**: `build_taskset`, the built-in domains (generators and their 0/1 verifiers) that
  examples/minimal_grpo.py trains on;
- **comparing results** (docs/analysis.md, torch-free): `analyze` (a pandas DataFrame of
  results -> a `Report`: verdicts and statistics as DataFrames, markdown, HTML, Jupyter,
  ``save``, ``gate``), `tracker_frame` (a tracker store's runs as such a DataFrame);
- **compare on your own trainer** (docs/extending.md): `Host` (the interface `compare` runs
  a trainer through) and `HOSTS` (the registry of hosts experiment files name).
"""

import importlib

#: each public name -> the module that defines it
_WHERE = {
    **dict.fromkeys(
        (
            "MIXERS",
            "REWEIGHTERS",
            "SCORERS",
            "SELECTORS",
            "SKIP_POLICIES",
            "CURRICULA",
            "Curriculum",
            "DomainScorer",
            "Mixer",
            "Reweighter",
            "Scorer",
            "Selector",
            "SkipPolicy",
        ),
        "dataflex_rl.core.base",
    ),
    **dict.fromkeys(
        (
            "RolloutBatch",
            "clean_rewards",
            "from_lists",
            "group_domain",
            "group_successes",
            "informative_mask",
            "rank_in_group",
        ),
        "dataflex_rl.core.batch",
    ),
    "param": "dataflex_rl.core.config",
    "PromptHistory": "dataflex_rl.core.history",
    "ConfigError": "dataflex_rl.core.registry",
    "Registry": "dataflex_rl.core.registry",
    "masked_row_means": "dataflex_rl.core.rowops",
    "masked_row_sums": "dataflex_rl.core.rowops",
    **dict.fromkeys(
        ("segment_count", "segment_max", "segment_min", "segment_sum"), "dataflex_rl.core.segment"
    ),
    "StrategySpec": "dataflex_rl.core.spec",
    "parse_strategy": "dataflex_rl.core.spec",
    "Decision": "dataflex_rl.core.strategy",
    "Strategy": "dataflex_rl.core.strategy",
    "PRESETS": "dataflex_rl.core.preset",
    "Driver": "dataflex_rl.hosts.common.driver",
    "Intake": "dataflex_rl.hosts.common.intake",
    **dict.fromkeys(("Generation", "StepHost", "StepResult"), "dataflex_rl.hosts.common.step"),
    "build_taskset": "dataflex_rl.tasks",
    **dict.fromkeys(("analyze", "tracker_frame", "Report"), "dataflex_rl.harness.reporting.frame"),
    "Host": "dataflex_rl.hosts.host",
    "HOSTS": "dataflex_rl.hosts.registry",
}


def __getattr__(name: str) -> object:
    """Import a public name on first use (then it is an ordinary module attribute)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'dataflex_rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__version__ = "0.1.0"
__all__ = [
    # running a strategy
    "Strategy",
    "Decision",
    "RolloutBatch",
    "Driver",
    "Intake",
    "Generation",
    "StepHost",
    "StepResult",
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
    "Curriculum",
    "param",
    "Registry",
    "SCORERS",
    "SELECTORS",
    "REWEIGHTERS",
    "MIXERS",
    "SKIP_POLICIES",
    "CURRICULA",
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
    # comparing results (docs/analysis.md)
    "analyze",
    "tracker_frame",
    "Report",
    # comparing on a trainer of your own (docs/extending.md#a-host-of-your-own)
    "Host",
    "HOSTS",
    "__version__",
]
