"""Clear messages for inputs a user brings (issue 12, item 11): a scorer of their own that
returns the wrong shape, and meta tensors or mixed devices in a batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import dataflex_rl  # noqa: F401
from dataflex_rl import Strategy
from dataflex_rl.core.base import DomainScorer, Scorer
from dataflex_rl.core.batch import BatchError, RolloutBatch, from_lists


@dataclass
class PerToken(Scorer):
    """A user scorer that returns [B, T] while declaring response-level scores."""

    granularity: ClassVar[str] = "response"

    def score(self, batch):
        return batch.response_mask.float()


@dataclass
class AList(Scorer):
    """Returns a Python list."""

    def score(self, batch):
        return [1.0] * batch.batch_size


@dataclass
class PerGroupTooLong(Scorer):
    granularity: ClassVar[str] = "group"

    def score(self, batch):
        return torch.zeros(batch.batch_size)


@dataclass
class TwoDomainsOnly(DomainScorer):
    def observe(self, batch):
        pass

    def values(self, num_domains):
        return torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.bool)


def _batch(**kw):
    return from_lists(
        [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], [2, 3, 1, 3], advantages=[1.0, -1.0, 1.0, -1.0], **kw
    )


@pytest.mark.parametrize(
    "mech, cls, error, message",
    [
        (
            "select",
            PerToken,
            ValueError,
            (
                r"scorer PerToken.score\(batch\) returned shape \(4, 3\); "
                r"response-level scores must have shape \[B\] = \(4,\)"
            ),
        ),
        ("reweight", PerToken, ValueError, r"PerToken.* must have shape \[B\] = \(4,\)"),
        (
            "select",
            AList,
            TypeError,
            (
                r"scorer AList.score\(batch\) must return a torch.Tensor of "
                r"shape \[B\] = \(4,\) \(response-level scores\), got list"
            ),
        ),
        (
            "select",
            PerGroupTooLong,
            ValueError,
            r"group-level scores must have shape \[G\] = \(2,\)",
        ),
    ],
)
def test_a_user_scorer_with_the_wrong_shape_is_named(mech, cls, error, message):
    actuator = {"select": "top_fraction", "reweight": "softmax"}[mech]
    s = Strategy({mech: {"scorer": f"{__name__}:{cls.__name__}", "actuator": actuator}})
    with pytest.raises(error, match=message):
        s.decide(_batch())


def test_a_domain_scorer_with_the_wrong_number_of_domains_is_named():
    s = Strategy(
        {
            "mix": {
                "scorer": f"{__name__}:TwoDomainsOnly",
                "actuator": {"name": "softmax"},
                "warmup_steps": 0,
                "every": 1,
            }
        },
        domains=("a", "b", "c"),
    )
    b = from_lists([1.0, 0.0], [0, 1], domain_ids=torch.tensor([0, 2]), domains=("a", "b", "c"))
    with pytest.raises(
        ValueError,
        match=r"TwoDomainsOnly.values\(D\) returned shape \(2,\); "
        r"domain-level scores must have shape \[D\] = \(3,\)",
    ):
        s.decide(b)


@pytest.mark.parametrize("field", ["rewards", "group_ids", "response_mask", "advantages"])
def test_meta_tensors_are_refused_naming_the_field(field):
    b = _batch()
    t = getattr(b, field)
    with pytest.raises(BatchError, match=f"{field} is a meta tensor"):
        RolloutBatch(
            **{
                **{
                    f: getattr(b, f)
                    for f in ("rewards", "response_mask", "group_ids", "advantages")
                },
                field: torch.empty_like(t, device="meta"),
            }
        )


def test_the_device_check_passes_one_device_and_names_a_meta_field():
    from dataflex_rl.core.batch import check_tensor_devices

    class Fake:
        rewards = torch.zeros(2)
        group_ids = torch.zeros(2, dtype=torch.int64)

    check_tensor_devices(Fake())  # one device: fine
    Fake.group_ids = torch.empty(2, device="meta")
    with pytest.raises(BatchError, match="group_ids is a meta tensor"):
        check_tensor_devices(Fake())
