"""Shared test settings: a moderate hypothesis profile (the CI machine has 2 shared cores), and
a kernel cache of the test run's own (`core.native`), so tests never write to ~/.cache."""

import os
import tempfile

from hypothesis import HealthCheck, settings

# inherited by the processes tests start (CLI runs, torchrun ranks): one build per test run
os.environ.setdefault("DATAFLEX_RL_CACHE", tempfile.mkdtemp(prefix="dataflex-rl-test-cache-"))

settings.register_profile(
    "dataflex",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("dataflex")
