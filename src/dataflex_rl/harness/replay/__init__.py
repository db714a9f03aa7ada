"""Replay: re-run strategies on a decision log's rollouts and report how their decisions agree."""
