"""Pre-rollout: skip candidate prompts whose history says they will not teach anything."""
