"""End to end: ``python -m verl.trainer.main_ppo`` with ``trainer.v1.trainer_mode=dataflex``,
the real v1 sync GRPO pipeline on CPU (FSDP2 actor on gloo, TransferQueue, replay buffer, rule
reward, old log-probs, advantages with rollout correction, actor update, checkpoints, resume).
Only generation is scripted (`verl_fake_rollout`) and the platform shimmed (`verl_cpu_shims`).

Three runs of a tiny Qwen2 (about 1.5 min each on 2 cores, mostly start-up):

* ``loss``: select after 1 warm-up step + softmax reweight, with verl's token IS weights on.
  Step 1: the actor gets verl's weights x ours. Step 2: every response is dropped -> grad 0.
* ``mix``: reward-gap mixing + GRESO skipping, 2 steps with checkpoints, then
* ``resume``: a 3rd step resumed from the step-2 checkpoint with the strategy state.
* ``ent``: ``high_entropy`` for one step, on the entropies verl's actor computed with the
  old log-probs.

Both write a decision log; replaying the run's own strategy on it reproduces every decision.
"""

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402

from dataflex_rl.hosts.common.state import load_state  # noqa: E402
from tests.hosts.verl_e2e_run import build_dataset, build_model, run  # noqa: E402

pytestmark = pytest.mark.e2e

# select: solve rate in (0.9, 1.0) keeps no group of this data, from the 2nd step on
LOSS_STRATEGY = """\
name: drop_all_after_warmup
select:
  scorer: solve_rate
  actuator: {name: band, low: 0.9, high: 1.0}
  warmup_steps: 1
reweight: softmax
"""
# math is solved 1 time in 4, logic always: reward-gap sends lagging math more prompts, and
# GRESO skips the logic prompts once their groups came back all-correct
MIX_STRATEGY = """\
name: mix_and_skip
mix:
  scorer: {name: domain_reward, window: 10}
  actuator: {name: reward_gap, temperature: 0.1, floor: 0.25}
  warmup_steps: 1
  every: 1
prerollout:
  actuator: {name: greso, explore_prob: 0.0, min_explore: 0.0}
"""

# the top 20% highest-entropy tokens of the batch, from verl's own entropies
ENTROPY_STRATEGY = """\
name: high_entropy_verl
tokens: high_entropy
"""

# the decision log under trainer.default_local_dir (ckpt/decisions), flushed every step
DECISION_LOG = ["+dataflex.decision_log.enabled=true", "+dataflex.decision_log.steps_per_file=1"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("verl_e2e") / "model")


@pytest.fixture(scope="module")
def loss_run(tmp_path_factory, model):
    work = tmp_path_factory.mktemp("loss")
    (work / "strategy.yaml").write_text(LOSS_STRATEGY)
    data = build_dataset(
        work / "train.parquet", [("math", 1), ("logic", 4), ("math", 2), ("logic", 0)] * 4
    )
    steps, record = run(
        work,
        data,
        model,
        2,
        [
            f"+dataflex.strategy={work / 'strategy.yaml'}",
            "algorithm.rollout_correction.rollout_is=token",
            *DECISION_LOG,
        ],
        "loss",
    )
    return steps, record


@pytest.fixture(scope="module")
def mix_runs(tmp_path_factory, model):
    work = tmp_path_factory.mktemp("mix")
    (work / "strategy.yaml").write_text(MIX_STRATEGY)
    data = build_dataset(work / "train.parquet", [("math", 1)] * 6 + [("logic", 4)] * 2)
    common = [f"+dataflex.strategy={work / 'strategy.yaml'}", "trainer.save_freq=1", *DECISION_LOG]
    first = run(work, data, model, 2, common, "mix")
    resumed = run(work, data, model, 3, [*common, "trainer.resume_mode=auto"], "resume")
    return work, first, resumed


@pytest.fixture(scope="module")
def entropy_run(tmp_path_factory, model):
    work = tmp_path_factory.mktemp("entropy")
    (work / "strategy.yaml").write_text(ENTROPY_STRATEGY)
    data = build_dataset(work / "train.parquet", [("math", 1), ("logic", 2)] * 4)
    extra = [f"+dataflex.strategy={work / 'strategy.yaml'}", *DECISION_LOG]
    return run(work, data, model, 1, [*extra, "+dataflex.decision_log.full_tokens=true"], "ent")


def load(record, name):
    return torch.load(record / name, weights_only=True)  # tensors, lists of str and bool


def test_actor_gets_verls_rollout_correction_times_our_weights(loss_run):
    steps, record = loss_run
    verl, actor = load(record, "verl_step1.pt"), load(record, "actor_step1.pt")
    assert steps[0]["dataflex/composed_rollout_is_weights"] == 1.0
    assert verl["keys"] == actor["keys"]
    mask = verl["response_mask"].bool()
    w_verl, w_actor = verl["rollout_is_weights"], actor["rollout_is_weights"]
    assert bool((w_verl[mask] > 0).all()) and not torch.allclose(
        w_verl[mask], torch.ones(int(mask.sum()))
    )
    ratio = torch.where(mask, w_actor / w_verl.clamp(min=1e-12), torch.zeros_like(w_verl))
    per_response = ratio.sum(1) / mask.sum(1)
    # one factor per response (ours is per response), mean 1 over informative responses
    assert torch.allclose(ratio, per_response[:, None] * mask, atol=1e-5)
    informative = verl["advantages"].abs().sum(1) > 0
    assert per_response[informative].mean().item() == pytest.approx(1.0, abs=1e-4)
    assert per_response[informative].std().item() > 0.05  # softmax(|A|) is not flat
    assert steps[0]["actor/grad_norm"] > 0


def test_every_response_dropped_means_zero_gradient(loss_run):
    steps, record = loss_run
    actor = load(record, "actor_step2.pt")
    assert actor["rollout_is_weights"].abs().sum() == 0
    assert steps[1]["dataflex/all_dropped"] == 1.0
    assert steps[1]["dataflex/kept_response_fraction"] == 0.0
    assert steps[1]["actor/grad_norm"] == 0.0
    assert steps[1]["actor/pg_loss"] == 0.0


def submitted(record):
    out = {}
    for line in (record / "submitted.txt").read_text().splitlines():
        step, *sources = line.split()
        out.setdefault(int(step), []).extend(sources)
    return out


def test_mixing_changes_which_prompts_are_sampled(mix_runs):
    _, (steps, record), _ = mix_runs
    sub = submitted(record)
    assert sorted(sub[1]) == ["logic", "logic", "math", "math"]  # uniform prior
    assert sorted(sub[2]) == ["logic", "math", "math", "math"]  # math lags: 0.75 / 0.25
    assert steps[0]["dataflex/mix/updated"] == 1.0
    assert steps[1]["dataflex/mix/domain/math/target"] == pytest.approx(0.75, abs=1e-3)
    assert steps[1]["dataflex/batch/domain/math/actual"] == pytest.approx(0.75)
    # both logic prompts came back all-correct at step 1: skipped at step 2, until the
    # rounds ran out and the plain batch's logic prompt was used to keep the batch at
    # train_batch_size (so, against the plain batch, nothing was skipped)
    assert steps[1]["dataflex/prerollout/candidates_skipped"] > 0
    assert steps[1]["dataflex/prerollout/forced"] == 1.0
    assert steps[1]["dataflex/prerollout/skipped"] == 0.0
    assert steps[1]["dataflex/prerollout/replacements"] == 0.0
    assert steps[1]["dataflex/prerollout/seconds_saved_est"] == 0.0
    # logic groups are all-correct, math groups 1 of 4: 2 of 4 groups, then 1 of 4
    assert steps[0]["dataflex/prerollout/zero_variance_through"] == 0.5
    assert steps[1]["dataflex/prerollout/zero_variance_through"] == 0.25


def test_strategy_state_survives_a_resume(mix_runs):
    work, (steps, _), (resumed, record) = mix_runs
    state = load_state(work / "ckpt" / "global_step_2" / "dataflex_state.safetensors")
    assert (work / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert "restored strategy state from" in (work / "log_resume.txt").read_text()
    assert [s["step"] for s in resumed] == [3]
    math_share = float(state["strategy"]["proportions"][1])  # domains: logic, math
    assert math_share == pytest.approx(0.75, abs=1e-3)
    # a fresh strategy would start from the uniform prior and an empty prompt history
    assert resumed[0]["dataflex/mix/domain/math/target"] == pytest.approx(math_share)
    assert resumed[0]["dataflex/prerollout/candidates_skipped"] > 0
    assert sorted(submitted(record)[3]) == ["logic", "math", "math", "math"]


def test_the_loss_runs_decision_log_replays_exactly(loss_run):
    from dataflex_rl.harness.replay.replay import read_log, replay

    _, record = loss_run
    log = read_log(record.parent / "ckpt" / "decisions")
    assert log.host == "verl" and log.steps["step"].tolist() == [0, 1]
    res = replay(log, [log.strategy])
    assert res.overall[log.strategy["name"]]["exact_steps"] == 2
    assert [r["kept"] for r in res.rows][1] == 0  # step 2 dropped everything


def test_the_mix_runs_decision_log_replays_exactly_across_the_resume(mix_runs):
    from dataflex_rl.harness.replay.replay import read_log, replay

    work, _, _ = mix_runs
    log = read_log(work / "ckpt" / "decisions")  # steps 0-1, then step 2 after the resume
    assert log.steps["step"].tolist() == [0, 1, 2]
    assert sorted(log.domains) == ["logic", "math"]
    res = replay(log, [log.strategy, "baseline"])
    assert res.overall["mix_and_skip"]["exact_steps"] == 3
    rows = [r for r in res.rows if r["strategy"] == "mix_and_skip"]
    assert rows[0]["target_math"] == pytest.approx(0.75, abs=1e-3)  # math lags


def test_high_entropy_keeps_the_top_fifth_of_verls_own_entropies(entropy_run):
    steps, record = entropy_run
    verl, actor = load(record, "verl_step1.pt"), load(record, "actor_step1.pt")
    mask = verl["response_mask"].bool()
    ent = verl["entropy"].float()
    assert bool((ent[mask] > 0).all())  # verl wrote its actor's entropies
    # the oracle: torch.quantile over verl's entropies of the valid tokens, keep those >= it
    keep = mask & (ent >= torch.quantile(ent[mask], 0.8))
    w = actor["rollout_is_weights"]
    assert torch.equal(w > 0, keep)  # the actor gets weight 0 off the kept tokens
    assert torch.allclose(w[keep], torch.ones(int(keep.sum())))  # and 1 on them
    assert steps[0]["dataflex/kept_token_fraction"] == pytest.approx(
        int(keep.sum()) / int(mask.sum())
    )
    # at least a fifth; more with ties (the scripted responses repeat: equal contexts give
    # equal entropies), never every token
    assert 0.2 <= steps[0]["dataflex/kept_token_fraction"] <= 0.5
    assert steps[0]["actor/grad_norm"] > 0


def test_the_entropy_runs_decision_log_replays_exactly(entropy_run):
    from dataflex_rl.harness.replay.replay import read_log, replay

    _, record = entropy_run
    log = read_log(record.parent / "ckpt" / "decisions")
    res = replay(log, [log.strategy])
    assert res.overall["high_entropy_verl"]["exact_steps"] == 1
    assert res.notes["high_entropy_verl"] == []
