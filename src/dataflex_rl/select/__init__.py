"""Selectors: which responses take part in the update."""

from dataflex_rl.select import (  # noqa: F401  (registers)
    band,
    group_subset,
    random_groups,
    top_fraction,
    top_p_mass,
    top_tokens,
)
