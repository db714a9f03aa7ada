"""examples/minimal_grpo.py: the strategy's decision reaches the loss (difffilter: exactly the
tokens of groups whose solve rate lies strictly between 0.2 and 0.8 are averaged over) and the
policy's parameters move; every preset (and a skip policy) runs two steps through the driver
the hosts use: dapo refills, high_entropy gets entropies, greso and thompson skip; its loss is
the engine's on the same batch and decision; what it cannot give is refused before a step."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from dataflex_rl import PRESETS, ConfigError, RolloutBatch, Strategy, parse_strategy
from dataflex_rl.cli import main
from dataflex_rl.hosts.engine.loss import policy_loss as engine_policy_loss
from dataflex_rl.hosts.engine.update import gradient_rows

ROOT = Path(__file__).resolve().parents[2]
P, G = 4, 4
#: skip policies as strategy YAML, set to skip a revisited prompt whose group agreed (greso
#: without exploration always, thompson almost always)
SKIPPING = {
    "greso": "name: greso\nprerollout:\n  actuator: {name: greso, explore_prob: 0.0, min_explore: 0.0}\n",
    # a near-flat prior and a wide band: a group that agreed makes a skip near certain
    "thompson": "name: thompson\nprerollout:\n  actuator: "
    "{name: thompson, prior_a: 0.01, prior_b: 0.01, low: 0.3, high: 0.7}\n",
}


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


def _signal_rows(rec) -> torch.Tensor:
    """[B] bool: the rows of groups whose rewards are not all equal (dapo's keep rule)."""
    rewards, groups = torch.tensor(rec["rewards"]), torch.tensor(rec["group_ids"])
    n = int(groups.max()) + 1
    low = torch.full((n,), math.inf).scatter_reduce(0, groups, rewards, "amin")
    high = torch.full((n,), -math.inf).scatter_reduce(0, groups, rewards, "amax")
    return (high > low)[groups]


@pytest.mark.parametrize("name", [*PRESETS, *SKIPPING])
def test_every_preset_runs_two_steps_through_the_driver(example, policy, tmp_path, name):
    strategy = name
    if name in SKIPPING:
        strategy = tmp_path / f"{name}.yaml"
        strategy.write_text(SKIPPING[name])
    args = example.Args(
        policy=str(policy),
        strategy=str(strategy),
        steps=3 if name in SKIPPING else 2,
        prompts_per_step=P,
        group_size=G,
        max_new_tokens=8,
        # two prompts per domain: the second step revisits the first's, which skipping reads
        train_size=2 if name in SKIPPING else 16,
    )
    _, history = example.train(args)
    assert [rec["step"] for rec in history] == list(range(args.steps))
    spec = parse_strategy(str(strategy))
    mechanisms = spec.mechanisms()
    for rec in history:
        lengths = torch.tensor(rec["response_lengths"])
        keep = torch.tensor(rec["keep_mask"])
        assert rec["loss"] is None or math.isfinite(rec["loss"])
        # the denominator, from the spec: every valid token, unless select renormalizes
        # (every preset's select does): then the rows it kept (with a token selection, the
        # rows of the groups with signal, dapo's)
        if "tokens" in mechanisms:
            rows = _signal_rows(rec) if "select" in mechanisms else torch.ones_like(keep)
            assert rec["loss_tokens"] == int(lengths[rows].sum())
            kept = sum(rec["kept_tokens"])
            assert 0.2 * rec["loss_tokens"] <= kept < 0.5 * rec["loss_tokens"]
        elif "select" in mechanisms:
            assert rec["loss_tokens"] == int(lengths[keep].sum())
        else:
            assert rec["loss_tokens"] == int(lengths.sum())
        if spec.refill is not None:
            # refilled: the step trains on P groups with signal and on nothing else
            signal = _signal_rows(rec)
            assert rec["metrics"]["dataflex/refill/full"] == 1.0
            assert int(signal.sum()) == P * G and not bool((keep & ~signal).any())
            assert "tokens" in mechanisms or torch.equal(keep, signal)
        else:
            assert len(rec["rewards"]) == P * G
    if spec.refill is not None:
        assert sum(rec["metrics"]["dataflex/refill/rounds"] for rec in history) > 0
    if name in SKIPPING:
        skipped = [rec["metrics"]["dataflex/prerollout/candidates_skipped"] for rec in history]
        assert skipped[0] == 0  # unseen prompts are always generated
        assert sum(skipped[1:]) > 0  # revisits of prompts whose groups agreed are skipped


def _batch() -> RolloutBatch:
    """4 groups of 4 (one informative pair of groups, one all-correct, one all-wrong), 3
    domains, T = 6, random lengths, old log-probs and entropies."""
    g = torch.Generator().manual_seed(3)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0])
    group_ids = torch.arange(4).repeat_interleave(4)
    by_group = rewards.view(4, 4)
    adv = (by_group - by_group.mean(1, keepdim=True)) / (by_group.std(1, keepdim=True) + 1e-6)
    lengths = torch.randint(1, 7, (16,), generator=g)
    mask = torch.arange(6)[None, :] < lengths[:, None]
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=group_ids,
        domain_ids=torch.tensor([0, 1, 2, 0]).repeat_interleave(4),
        domains=("math", "logic", "science"),
        advantages=adv.reshape(-1, 1) * mask,
        old_log_probs=-torch.rand(16, 6, generator=g) * mask,
        entropies=torch.rand(16, 6, generator=g) * 3 * mask,
        prompt_keys=tuple(f"p{i}" for i in group_ids.tolist()),
    )


@pytest.mark.parametrize("name", PRESETS)
def test_the_examples_loss_is_the_engines_on_the_same_batch(example, name):
    """Same batch, decision and log-probs: the example's loss (every row, decision.aggregate)
    equals the engine's (the rows with a gradient up to their longest response, verl's
    token-mean denominator) and a plain loop over the tokens; so do their gradients."""
    batch = _batch()
    decision = Strategy(name, domains=batch.domains).decide(batch)
    adv = batch.advantages if decision.advantages is None else decision.advantages
    old = batch.old_log_probs
    noise = (torch.rand(16, 6, generator=torch.Generator().manual_seed(4)) - 0.5) * 0.8
    logp = (old + noise).requires_grad_(True)  # ratios in [.67, 1.5]: no dual clip
    ours = example.policy_loss(decision, logp, old, adv, 0.2)
    (grad_ours,) = torch.autograd.grad(ours, logp)

    rows, num_tokens = gradient_rows(decision, adv, "token-mean")
    idx = rows.nonzero().squeeze(1)
    T = int(batch.response_mask[idx].sum(1).max()) if idx.numel() else 0
    mask = decision.denominator_mask
    per_token, _ = engine_policy_loss(logp[idx, :T], old[idx, :T], adv[idx, :T], mask[idx, :T])
    engine = decision.aggregate(per_token, idx, num_tokens)
    (grad_engine,) = torch.autograd.grad(engine, logp, allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(ours, engine, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_ours, grad_engine, rtol=1e-6, atol=1e-7)

    # the plain loop: sum of weight x clipped loss over the denominator's tokens / their count
    w, total, count = decision.weights_per_token, 0.0, 0
    for b in range(16):
        for t in range(6):
            if mask[b, t]:
                r, a = math.exp(float(logp[b, t].detach() - old[b, t])), float(adv[b, t])
                total += float(w[b, t]) * -min(r * a, min(max(r, 0.8), 1.2) * a)
                count += 1
    assert count == int(decision.denominator_tokens())
    assert float(ours.detach()) == pytest.approx(total / max(count, 1), rel=1e-5, abs=1e-7)
    assert abs(total) > 1e-3  # the informative groups keep a loss to compare


@pytest.mark.parametrize(
    "spec, missing",
    [
        (
            "tokens: {preset: high_entropy, actuator: {scope: micro_batch}}",
            r"needs micro_batch_ids, which this host does not provide",
        ),
        (
            "prerollout: {actuator: probe}",
            r"'probe' reads the policy's prompt representation .* the minimal_grpo host does "
            r"not provide",
        ),
    ],
)
def test_a_strategy_the_loop_cannot_serve_is_refused_before_the_first_step(
    example, tmp_path, spec, missing
):
    path = tmp_path / "s.yaml"
    path.write_text(spec + "\n")
    # the policy is not even loaded: the refusal comes first, in one line
    args = example.Args(policy=str(tmp_path / "no_policy"), strategy=str(path), steps=1)
    with pytest.raises(ConfigError, match=missing) as err:
        example.train(args)
    assert "\n" not in str(err.value)
