"""Curriculum: which prompts of each domain the intake draws, toward a target pass rate."""

from dataflex_rl.curriculum import target  # noqa: F401  (registers)
