"""verl's asynchronous trainers with a strategy: ``trainer.v1.trainer_mode`` =
``dataflex_colocate_async`` / ``dataflex_separate_async``, the real v1 pipelines on CPU
(`verl_e2e_run`: generation scripted, the rest verl's own: the asynchronous replay buffer,
warm-up batches, stale-group eviction, DAPO's filter, the actor update).

Four runs (about 1.5 min each on 2 cores):

* ``colocate``: difffilter + softmax + reward-gap mixing, 3 steps, one warm-up batch: the
  groups of step 1 wait one update (staleness 1 from step 2 on, as verl counts it), the mix
  moves the draws after the first update and the trained batch one step later;
* ``separate``: the same strategy with ``admission: {max_staleness: 0}`` in separate_async
  (two updates a step: ``parameter_sync_step`` 2): verl evicts the waiting groups of step 1
  at step 2, so every trained group is fresh;
* ``colocate_dapo`` / ``separate_dapo``: dapo through verl's ``filter_groups``: every update
  holds its full count of groups, none of them zero-variance.

Refusals (no Ray: the constructors only) name the mode and verl's code.
"""

import json
import logging

import pytest

pytest.importorskip("verl")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.hosts.verl.trainer import (  # noqa: E402
    DataflexColocateAsyncTrainer,
    DataflexSeparateAsyncTrainer,
    DataflexTrainer,
)
from tests.hosts.verl_e2e_run import build_dataset, build_model, run  # noqa: E402
from tests.hosts.verl_helpers import verl_config  # noqa: E402

COLOCATE = "dataflex_colocate_async"
SEPARATE = "dataflex_separate_async"
#: separate_async on the CPU path: two updates a step (train_batch_size 4 = 2 x 2), no
#: colocated (hybrid) replicas, a no-op weight-sync backend (`verl_cpu_shims`)
SEPARATE_SETTINGS = [
    "trainer.v1.separate_async.parameter_sync_step=2",
    "trainer.v1.separate_async.num_warmup_batches=1",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_test",
    "actor_rollout_ref.hybrid_engine=False",
]
#: verl 0.9.1's PPOTrainerSeparateAsync._setup logs with ``logger.info(..., flush=True)``
#: when hybrid_engine=False, a TypeError at INFO level: its logger at WARNING
SEPARATE_ENV = {"VERL_LOGGING_LEVEL": "WARNING"}

# difffilter keeps the math groups (solved 1 or 3 times in 4) and drops the logic ones
# (always solved); softmax weighs the rare outcome of a group more; reward-gap mixing sends
# the lagging domain (math) more prompts
COMBINED = """\
name: async_combined
select: {preset: difffilter}
reweight: {preset: softmax}
mix:
  scorer: {name: domain_reward, window: 10}
  actuator: {name: reward_gap, temperature: 0.1, floor: 0.25}
  warmup_steps: 1
  every: 1
"""
ADMISSION = "admission: {max_staleness: 0, past: drop}\n"
DECISION_LOG = ["+dataflex.decision_log.enabled=true", "+dataflex.decision_log.steps_per_file=1"]
ROWS = [("math", 1), ("logic", 4), ("math", 3), ("logic", 4)] * 4
DAPO_ROWS = [("math", 2), ("logic", 4), ("math", 0), ("logic", 1)] * 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("verl_async") / "model")


def _run(tmp_path_factory, model, tag, mode, strategy, rows, steps, extra=()):
    work = tmp_path_factory.mktemp(tag)
    (work / "strategy.yaml").write_text(strategy)
    data = build_dataset(work / "train.parquet", rows)
    settings = SEPARATE_SETTINGS if mode == SEPARATE else []
    out, record = run(
        work,
        data,
        model,
        steps,
        [f"+dataflex.strategy={work / 'strategy.yaml'}", *settings, *DECISION_LOG, *extra],
        tag,
        mode=mode,
        env=SEPARATE_ENV if mode == SEPARATE else None,
    )
    return work, out, record


@pytest.fixture(scope="module")
def colocate(tmp_path_factory, model):
    """2 steps with checkpoints, then a 3rd resumed from the step-2 checkpoint (the groups
    then waiting in TransferQueue, which verl restores, decided after the resume): (work,
    the 3 steps' metrics, the first run's record, the resumed run's)."""
    save = ["trainer.save_freq=1"]
    work, first, record = _run(
        tmp_path_factory, model, "colocate", COLOCATE, COMBINED, ROWS, 2, save
    )
    resumed, record2 = run(
        work,
        work / "train.parquet",
        model,
        3,
        [
            f"+dataflex.strategy={work / 'strategy.yaml'}",
            *DECISION_LOG,
            *save,
            "trainer.resume_mode=auto",
        ],
        "colocate_resume",
        mode=COLOCATE,
    )
    return work, first + resumed, record, record2


@pytest.fixture(scope="module")
def separate(tmp_path_factory, model):
    return _run(tmp_path_factory, model, "separate", SEPARATE, COMBINED + ADMISSION, ROWS, 2)


@pytest.fixture(scope="module")
def colocate_dapo(tmp_path_factory, model):
    return _run(tmp_path_factory, model, "colocate_dapo", COLOCATE, "select: dapo\nrefill: {}\n",
                DAPO_ROWS, 2)  # fmt: skip


@pytest.fixture(scope="module")
def separate_dapo(tmp_path_factory, model):
    return _run(tmp_path_factory, model, "separate_dapo", SEPARATE, "select: dapo\nrefill: {}\n",
                DAPO_ROWS, 2)  # fmt: skip


def responses(work) -> pd.DataFrame:
    """The decision log's rows (one per response), padding left out."""
    frame = pd.concat(
        pd.read_parquet(f) for f in sorted((work / "ckpt/decisions/responses").glob("*.parquet"))
    )
    frame = frame[~frame["is_padding"]].copy()
    frame["domain"] = frame["domain"].astype(str)
    return frame


def submitted(record) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in (record / "submitted.txt").read_text().splitlines():
        step, *sources = line.split()
        out.setdefault(int(step), []).extend(sources)
    return out


def group_rates(frame: pd.DataFrame) -> pd.Series:
    return frame.groupby(["step", "group"])["reward"].transform("mean")


# ---------------------------------------------------------------- colocate_async
def test_colocate_difffilter_keeps_exactly_the_groups_inside_its_band(colocate):
    work, steps, _, _ = colocate
    log = responses(work)
    assert sorted(log["step"].unique()) == [0, 1, 2]  # one update a step
    rate = group_rates(log)
    assert set(rate.round(2)) <= {0.25, 0.75, 1.0}  # the script: math 1 or 3 of 4, logic 4
    assert (log["keep"] == ((rate > 0.2) & (rate < 0.8))).all()
    assert (log["keep"] == (log["domain"] == "math")).all()
    for s, m in zip(range(3), steps):
        kept = log[log["step"] == s]
        assert m["dataflex/kept_group_fraction"] == pytest.approx(
            kept.groupby("group")["keep"].first().mean()
        )


def test_colocate_softmax_weighs_the_rare_outcome_of_a_kept_group_more(colocate):
    work, _, _, record = colocate
    log = responses(work)
    kept = log[log["keep"]]
    assert (log.loc[~log["keep"], "weight"] == 0).all()
    for (_, _), g in kept.groupby(["step", "group"]):
        rare = g["reward"] == (1.0 if g["reward"].mean() < 0.5 else 0.0)
        assert rare.sum() == 1  # 1 of 4 solved, or 3 of 4
        assert g.loc[rare, "weight"].iloc[0] > g.loc[~rare, "weight"].max()
    # each update's kept weights average 1 (an update whose groups verl picked from the logic
    # ones keeps none: which of a step's waiting groups an update takes is verl's set order)
    means = kept.groupby("step")["weight"].mean().tolist()
    assert len(means) >= 1 and means == pytest.approx([1.0] * len(means), abs=1e-4)
    # what the actor got at step 3 (after the resume): verl's weights x ours, ours per
    # response (rollout correction off: exactly the decision's weights)
    actor = torch.load(record / "actor_step3.pt", weights_only=True)
    mask = actor["response_mask"].bool()
    per_response = (actor["rollout_is_weights"] * mask).sum(1) / mask.sum(1).clamp(min=1)
    got = sorted(round(float(w), 4) for w, p in zip(per_response, actor["padding"]) if not p)
    logged = sorted(round(float(w), 4) for w in kept[kept["step"] == 2]["weight"])
    assert [w for w in got if w > 0] == logged


def test_colocate_staleness_is_the_wait_in_the_buffer(colocate):
    # one warm-up batch: step 1 trains groups of the policy it starts from, every later step
    # the groups submitted one step before (the buffer takes the oldest first)
    work, steps, _, _ = colocate
    log = responses(work)
    assert log.groupby("step")["staleness"].agg(["min", "max"]).values.tolist() == [
        [0, 0],
        [1, 1],
        [1, 1],
    ]
    assert [m["dataflex/async/staleness_mean"] for m in steps] == [0.0, 1.0, 1.0]
    assert [m["dataflex/async/staleness_max"] for m in steps] == [0.0, 1.0, 1.0]
    # verl's own count of the same thing
    assert [m["training/off_policy/trajectory_staleness_worst/mean"] for m in steps] == [
        0.0,
        1.0,
        1.0,
    ]


def test_colocate_mixing_moves_the_draws_then_the_trained_batch_one_step_later(colocate):
    # which 4 of step 1's 8 waiting groups (all of one policy version) the first update takes
    # is verl's choice (ReplayBuffer._select_prompt_uids sorts a set by global step only), so
    # what it observed is read from the decision log
    work, steps, record, _ = colocate
    sub = submitted(record)
    # step 1: the warm-up batch and the step's, uniform prior
    assert sorted(sub[1]) == ["logic"] * 4 + ["math"] * 4
    first = responses(work)
    first = first[first["step"] == 0]
    target = steps[1]["dataflex/mix/domain/math/target"]
    if (first["domain"] == "math").any():
        # math lags (solved 1 or 3 of 4 against logic's 4 of 4): its target rises
        assert target > 0.55
    # the draw of step 2 follows the target the first update set
    assert abs(sub[2].count("math") - 4 * target) < 1
    # step 3 trains what step 2 submitted (the wait of one update), after the resume: the
    # groups verl restored keep the domains the intake drew them with
    assert steps[2]["dataflex/batch/domain/math/actual"] == pytest.approx(sub[2].count("math") / 4)


def test_colocate_resume_restores_the_strategy_and_the_waiting_groups(colocate):
    from dataflex_rl.harness.replay.replay import read_log, replay

    work, steps, record, record2 = colocate
    folder = work / "ckpt" / "global_step_2"
    assert (folder / "transfer_queue").exists()  # verl's own, asynchronous modes
    waiting = json.loads((folder / "dataflex_prompts.json").read_text())
    assert len(waiting) == 4  # what step 2 submitted, not yet trained on
    ids = {"logic": 0, "math": 1}  # the domains' order
    assert sorted(v[1] for v in waiting.values()) == sorted(ids[d] for d in submitted(record)[2])
    text = (work / "log_colocate_resume.txt").read_text()
    assert "restored strategy state from" in text
    assert [s["step"] for s in steps] == [1, 2, 3]
    # the mix's proportions were restored: a fresh strategy holds the uniform prior through
    # its warm-up step, a restored one that had moved stays off it
    key = "dataflex/mix/domain/math/target"
    if steps[1][key] != pytest.approx(0.5):
        assert steps[2][key] != pytest.approx(0.5)
    assert "submitted.txt" not in {p.name for p in record2.iterdir()} or all(
        s >= 3 for s in submitted(record2)
    )
    log = read_log(work / "ckpt" / "decisions")
    assert log.steps["step"].tolist() == [0, 1, 2]
    res = replay(log, [log.strategy])
    assert res.overall["async_combined"]["exact_steps"] == 3


# ---------------------------------------------------------------- separate_async
def test_separate_two_updates_a_step_each_decided(separate):
    work, steps, _ = separate
    log = responses(work)
    assert sorted(log["step"].unique()) == [0, 1, 2, 3]  # (global step - 1) x 2 + update
    assert (log.groupby("step")["group"].nunique() == 2).all()  # ppo_mini_batch_size groups
    rate = group_rates(log)
    assert (log["keep"] == ((rate > 0.2) & (rate < 0.8))).all()
    assert (log["keep"] == (log["domain"] == "math")).all()
    kept = log[log["keep"]]
    assert (log.loc[~log["keep"], "weight"] == 0).all()
    for _, g in kept.groupby(["step", "group"]):
        rare = g["reward"] == (1.0 if g["reward"].mean() < 0.5 else 0.0)
        assert g.loc[rare, "weight"].iloc[0] > g.loc[~rare, "weight"].max()


def test_separate_admission_drops_the_waiting_groups_through_verls_buffer(separate):
    # max_staleness 0 -> verl's max_off_policy_threshold 1: at step 2 the 4 groups left from
    # step 1 are evicted and replaced, so every trained group is fresh (without admission:
    # staleness 1 from step 2 on, as in colocate)
    work, steps, record = separate
    log = responses(work)
    assert (log["staleness"] == 0).all()
    assert [m["dataflex/async/staleness_max"] for m in steps] == [0.0, 0.0]
    assert steps[1]["training/off_policy/evicted_samples"] > 0
    assert "training/off_policy/evicted_samples" not in steps[0]
    assert "max_off_policy_threshold=1" in (work / "log_separate.txt").read_text()
    # the replacements were drawn by the intake with the mix's proportions of step 2
    sub = submitted(record)
    assert sorted(sub[1]) == ["logic"] * 4 + ["math"] * 4
    assert sub[2].count("math") > sub[2].count("logic")


# ---------------------------------------------------------------- dapo in both modes
@pytest.mark.parametrize("which, per_update", [("colocate_dapo", 4), ("separate_dapo", 2)])
def test_dapo_updates_hold_their_count_of_groups_with_signal(request, which, per_update):
    work, steps, _ = request.getfixturevalue(which)
    log = responses(work)
    rate = group_rates(log)
    assert ((rate > 0) & (rate < 1)).all()  # no zero-variance group reached an update
    assert (log.groupby("step")["group"].nunique() == per_update).all()
    assert log["keep"].all()
    # the script: math 2 of 4 and logic 1 of 4 have signal, the other half is evicted
    assert set(rate.round(2)) <= {0.25, 0.5}
    assert sum(m.get("training/filter_groups/evicted_samples", 0) for m in steps) > 0
    text = (work / f"log_{which}.txt").read_text()
    assert "evicts each finished zero-variance group and submits one new prompt" in text


# ---------------------------------------------------------------- set-up and refusals
def test_the_async_modes_are_verls_own_trainers_with_the_hooks():
    assert get_trainer_cls(COLOCATE) is DataflexColocateAsyncTrainer
    assert get_trainer_cls(SEPARATE) is DataflexSeparateAsyncTrainer
    t = DataflexColocateAsyncTrainer(
        verl_config(f"trainer.v1.trainer_mode={COLOCATE}", "+dataflex.strategy=difffilter")
    )
    assert t.trainer_mode == "colocate_async" and t.parameter_sync_step == 1
    assert type(t.replay_buffer) is ReplayBufferAsync
    s = DataflexSeparateAsyncTrainer(
        verl_config(
            f"trainer.v1.trainer_mode={SEPARATE}",
            "+dataflex.strategy=softmax",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
        )
    )
    assert s.trainer_mode == "separate_async" and s.parameter_sync_step == 4
    s.global_steps, s.local_trigger_step = 3, 2
    assert s._strategy_step() == 10  # (3 - 1) x 4 + 2: one strategy step per update
    # the step's own batch is drawn before its updates: at its first update's strategy step
    from verl.trainer.ppo.v1.trainer_separate_async import HybridEngineMode

    seen = []
    s.current_mode = HybridEngineMode.TRAINER
    s._add_batch_to_generate = lambda: seen.append(s._strategy_step())
    s.local_trigger_step = 3  # left by step 2's last update
    s.prepare_step()
    assert seen == [8]


def test_staleness_is_verls_version_lag_of_the_oldest_generating_weights():
    t = DataflexColocateAsyncTrainer(
        verl_config(f"trainer.v1.trainer_mode={COLOCATE}", "+dataflex.strategy=difffilter")
    )
    t.global_steps = 4  # the weights before step 4's update: version 3
    tags = [{"min_global_steps": 1, "max_global_steps": 2}, {"min_global_steps": 3}, {}]
    assert t._staleness(tags) == [2, 0, 0]  # no version (padding): 0
    sync = DataflexTrainer(verl_config("+dataflex.strategy=difffilter"))
    sync.global_steps = 4
    assert sync._staleness(tags) is None  # the sync mode fills none


def test_admission_maps_onto_verls_stale_group_eviction():
    t = DataflexColocateAsyncTrainer(
        verl_config(
            f"trainer.v1.trainer_mode={COLOCATE}",
            "+dataflex.strategy.name=a",
            "+dataflex.strategy.admission.max_staleness=2",
        )
    )
    assert t.config.trainer.v1.sampler.max_off_policy_threshold == 3
    assert t.replay_buffer.max_off_policy_threshold == 3
    assert t.replay_buffer.max_off_policy_strategy == "drop"


@pytest.mark.parametrize(
    "mode, overrides, message",
    [
        (
            "dataflex",
            ["+dataflex.strategy.admission.max_staleness=1"],
            r"admission acts under asynchronous.*PPOTrainerSync.*dataflex_colocate_async",
        ),
        (
            COLOCATE,
            ["+dataflex.strategy.admission.past=pace"],
            r"admission \(verl colocate_async\)\.past: 'pace'.*ReplayBufferAsync\."
            r"_stale_terminal_keys",
        ),
        (
            COLOCATE,
            [
                "+dataflex.strategy.mix.preset=dump_ucb",
                "+dataflex.strategy.admission.max_staleness={math: 1, logic: 2}",
            ],
            r"admission \(verl colocate_async\)\.max_staleness: one limit per domain.*"
            r"_stale_terminal_keys",
        ),
        (
            COLOCATE,
            ["+dataflex.strategy.rollouts.mode=until_signal"],
            r"rollouts: per-prompt budgets need generation per prompt",
        ),
        (
            COLOCATE,
            [
                "+dataflex.strategy.select.preset=difffilter",
                "+dataflex.strategy.refill.max_rounds=2",
            ],
            r"refill: on verl, refilling is verl's own algorithm.filter_groups",
        ),
    ],
)
def test_what_cannot_act_is_refused_before_any_worker_starts(mode, overrides, message):
    cls = get_trainer_cls(mode)
    with pytest.raises(ConfigError, match=message):
        cls(verl_config(f"trainer.v1.trainer_mode={mode}", "+dataflex.strategy.name=x", *overrides))


def test_dapo_in_an_async_mode_says_how_verl_refills_there(caplog):
    caplog.set_level(logging.WARNING, logger="dataflex_rl.hosts.verl")
    t = DataflexColocateAsyncTrainer(
        verl_config(f"trainer.v1.trainer_mode={COLOCATE}", "+dataflex.strategy=dapo")
    )
    assert t.replay_buffer.filter_groups_metric == "reward"
    assert "in verl's colocate_async mode" in caplog.text
    assert "submits one new prompt for it" in caplog.text
    # the sync mode keeps its own message
    caplog.clear()
    DataflexTrainer(verl_config("+dataflex.strategy=dapo"))
    assert "twice" not in caplog.text and "refills until the batch is full" in caplog.text
