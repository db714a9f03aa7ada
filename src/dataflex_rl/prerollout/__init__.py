"""Pre-rollout: skip candidate prompts whose history says they will not teach anything."""

from dataflex_rl.prerollout import greso, probe, thompson  # noqa: F401  (registers)
