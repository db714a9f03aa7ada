"""The one naming rule for per-domain metric keys (`core.metrics`)."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.metrics import check_domain_names, domain_metric, metric_domain, step_metrics
from dataflex_rl.core.registry import ConfigError


@pytest.mark.parametrize(
    "name, written",
    [
        ("math", "math"),
        ("openai/gsm8k", "openai_gsm8k"),
        ("a b\tc", "a_b_c"),
        ("lighteval/MATH/level 5", "lighteval_MATH_level_5"),
        ("x-y.z", "x-y.z"),
    ],
)
def test_metric_domain_replaces_slashes_and_whitespace(name, written):
    assert metric_domain(name) == written


def test_domain_metric_is_one_key_level_per_part():
    key = domain_metric("mix", "openai/gsm8k", "target")
    assert key == "dataflex/mix/domain/openai_gsm8k/target"
    assert key.split("/") == ["dataflex", "mix", "domain", "openai_gsm8k", "target"]


def test_check_domain_names_refuses_collisions_only():
    check_domain_names(["math", "openai/gsm8k", "logic"])
    with pytest.raises(
        ConfigError,
        match=r"hosts\.domains: 'a/b' and 'a_b' are both written "
        r"'a_b'",
    ):
        check_domain_names(["a/b", "a_b"], "hosts.domains")


def test_step_metrics_per_domain_batch_share_and_signal():
    # groups 0, 1 of domain "x/y", group 2 of "z": shares 2/3 and 1/3; signal as given
    b = from_lists(
        [1.0, 0.0, 1.0, 0.0, 1.0, 1.0],
        [0, 0, 1, 1, 2, 2],
        domain_ids=torch.tensor([0, 0, 0, 0, 1, 1]),
        domains=("x/y", "z"),
        advantages=[1.0] * 6,
    )
    keep = b.active_mask
    m = step_metrics(b, keep, keep.float(), per_domain=True, signal=torch.tensor([0.3, 0.7]))
    assert m["dataflex/batch/domain/x_y/actual"] == pytest.approx(2 / 3)
    assert m["dataflex/batch/domain/z/actual"] == pytest.approx(1 / 3)
    assert m["dataflex/mix/domain/x_y/signal"] == pytest.approx(0.3)
    assert not any(k.startswith("dataflex/domain/") for k in m)
