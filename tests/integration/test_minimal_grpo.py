"""examples/minimal_grpo.py, run for a few steps on the exported tiny policy: the strategy's keep
mask reaches the loss (difffilter: exactly the tokens of groups whose solve rate lies strictly
between 0.2 and 0.8 are averaged over) and the policy's parameters move."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from dataflex_rl.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location(
        "minimal_grpo", ROOT / "examples" / "minimal_grpo.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["minimal_grpo"] = module  # its dataclass resolves its annotations there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["minimal_grpo"]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("policy") / "tiny"
    assert main(["export", "policy", "--out", str(out)]) == 0
    return out


def test_difffilter_drops_the_groups_that_agree_and_the_loss_counts_the_rest(example, policy):
    from transformers import AutoModelForCausalLM

    P, G = 6, 4
    args = example.Args(
        policy=str(policy), strategy="difffilter", steps=3, prompts_per_step=P, group_size=G
    )
    model, history = example.train(args)
    dropped_groups = kept_groups = 0
    for rec in history:
        rewards = torch.tensor(rec["rewards"]).view(P, G)
        # difffilter: solve rate in (0.2, 0.8), bounds exclusive: 1, 2 or 3 of 4 correct
        keep = ((rewards.mean(1) > 0.2) & (rewards.mean(1) < 0.8)).repeat_interleave(G)
        assert rec["keep_mask"] == keep.tolist()
        lengths = torch.tensor(rec["response_lengths"])
        assert rec["loss_tokens"] == int(lengths[keep].sum())  # renormalized over kept tokens
        kept_groups += int(keep.sum()) // G
        dropped_groups += P - int(keep.sum()) // G
        assert rec["proportions"] == pytest.approx([1 / 3] * 3)  # no mix: uniform draws
    # the check above bites only if both kinds of group occurred
    assert dropped_groups > 0 and kept_groups > 0
    start = AutoModelForCausalLM.from_pretrained(str(policy))
    moved = [
        not torch.equal(a, b) for a, b in zip(start.parameters(), model.parameters(), strict=True)
    ]
    assert all(moved)  # every tensor gets a gradient from the kept groups' loss
