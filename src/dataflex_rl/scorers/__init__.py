"""Scorers: signals the training loop already has -> scores."""

from dataflex_rl.scorers import domain, outcome, policy  # noqa: F401  (registers)
