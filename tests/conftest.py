"""Shared test settings: a moderate hypothesis profile (the CI machine has 2 shared cores)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dataflex",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("dataflex")
