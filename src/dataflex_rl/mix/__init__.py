"""Domain mixing: which domains the next batches come from."""

from dataflex_rl.mix import mixers  # noqa: F401  (registers)
