"""Selectors: which responses take part in the update."""

from dataflex_rl.select import band, group_subset, top_fraction  # noqa: F401  (registers)
