"""Reweighters: how much each response or token counts."""

from dataflex_rl.reweight import response, token  # noqa: F401  (registers)
