"""dataflex strategies inside TRL 1.16's experimental ``AsyncGRPOTrainer``
(`DataflexAsyncGRPOTrainer`), on CPU: a stand-in rollout worker and weight transfer in place of
the vLLM server, three GPU-only calls stood in (tests/hosts_trl/async_standin.py), everything
else real TRL. docs/hosts/trl.md#asynchronous-training-asyncgrpotrainer."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from tests.hosts_trl.async_standin import CopyWeights, StandInWorker, cpu_async_trl  # noqa: E402
from tests.hosts_trl.tiny import hashed_reward, tiny_dataset, tiny_model, tiny_tokenizer  # noqa: E402

G = 4
BATCH = 8  # samples per optimizer step: 2 groups


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_async")
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def run(policy_dir, tmp_path, monkeypatch, dataflex, *, steps=3, burst=6, **extra):
    """Train ``steps`` optimizer steps; returns (trainer, worker)."""
    from dataflex_rl.hosts.trl import DataflexAsyncGRPOConfig, DataflexAsyncGRPOTrainer

    cpu_async_trl(monkeypatch)
    tok = tiny_tokenizer()
    data = tiny_dataset(4)
    worker = StandInWorker(
        tiny_model(tok), tok, data, hashed_reward, G=G, max_new_tokens=6, burst=burst
    )
    settings = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        num_generations=G,
        max_completion_length=6,
        token_budget=0,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-3,
        seed=0,
        dataflex=dataflex,
    )
    args = DataflexAsyncGRPOConfig(**{**settings, **extra})
    trainer = DataflexAsyncGRPOTrainer(
        model=policy_dir,
        reward_funcs=hashed_reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        rollout_worker=worker,
        weight_transfer=CopyWeights(worker),
    )
    trainer.train()
    return trainer, worker


def spy(monkeypatch):
    """The samples the gate hands to TRL's RolloutQueueDataset, in order (behaviour unchanged)."""
    from dataflex_rl.hosts.trl.async_gate import GroupGate

    passed = []
    get = GroupGate.get

    def recording(self, timeout=None):
        sample = get(self, timeout)
        passed.append(sample)
        return sample

    monkeypatch.setattr(GroupGate, "get", recording)
    return passed


def logs(trainer):
    return [h for h in trainer.state.log_history if "loss" in h]


def test_plain_grpo_trains_and_records_staleness(policy_dir, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    passed = spy(monkeypatch)
    block = {"strategy": "baseline", "decision_log": {"enabled": True}}
    trainer, worker = run(
        policy_dir, tmp_path, monkeypatch, block, steps=4, save_strategy="steps", save_steps=2
    )
    # the driver's state rides in TRL's checkpoints
    assert (tmp_path / "out" / "checkpoint-2" / "dataflex_state.safetensors").is_file()
    entries = logs(trainer)
    assert len(entries) == 4 and any(h["grad_norm"] > 0 for h in entries)
    # the worker's bursts of 6 groups outlive weight syncs: the later groups are stale
    version = {gid: v for gid, v, _ in worker.records}
    assert len(set(version.values())) >= 2
    # every sample passes unchanged (baseline acts on nothing), whole groups in queue order
    gids = [s.group_id for s in passed]
    assert gids == sorted(gids) and all(gids.count(g) == G for g in set(gids[:-G]))
    rewards = {gid: r for gid, _, r in worker.records}
    for k in range(0, len(passed) - G + 1, G):
        r = torch.tensor(rewards[passed[k].group_id], dtype=torch.float64)
        want = (r - r.mean()) / (r.std(unbiased=False) + 1e-8)
        got = torch.tensor([s.advantage for s in passed[k : k + G]], dtype=torch.float64)
        assert torch.allclose(got, want, atol=1e-6)
    # the staleness the strategy saw is the one TRL measures itself, per sample, at yield time
    for h in entries:
        assert h["dataflex/async/staleness_mean"] == pytest.approx(h["sample/staleness_mean"])
        assert h["dataflex/async/staleness_max"] == h["sample/staleness_max"]
    assert max(h["dataflex/async/staleness_max"] for h in entries) >= 1
    # the decision log holds it per response: the trainer's version when decided - the worker's
    resp = pq.read_table(trainer.driver.log.folder / "responses").to_pydict()
    st = resp["staleness"]
    assert max(st) >= 1 and min(st) == 0
    assert len(st) == len(resp["reward"]) and len(st) % G == 0
    # the rewards logged are the worker's, group by group, in queue order
    logged = [resp["reward"][i : i + G] for i in range(0, len(st), G)]
    assert logged == [r for _, _, r in worker.records[: len(logged)]]


def test_dapo_refills_from_the_queue_and_trains_only_informative_groups(
    policy_dir, tmp_path, monkeypatch
):
    passed = spy(monkeypatch)
    trainer, worker = run(policy_dir, tmp_path, monkeypatch, {"strategy": "dapo"}, steps=3)
    # hand-worked: groups come off the queue in order; dapo keeps those whose rewards differ
    # and keeps taking groups until an update holds n = 2 kept ones
    informative = [gid for gid, _, r in worker.records if len(set(r)) > 1]
    zero = [gid for gid, _, r in worker.records if len(set(r)) == 1]
    n = BATCH // G
    trained = sorted({s.group_id for s in passed})
    assert len(trained) >= 3 * n
    assert trained == informative[: len(trained)]  # the first informative groups, in order
    assert any(z < trained[-1] for z in zero)  # zero-variance groups came and were skipped
    assert sorted(trainer._trained_groups) == trained  # what TRL's collator trained on
    # each update holds n whole groups; their advantages are the worker's, untouched
    by_gid = {}
    for s in passed:
        by_gid.setdefault(s.group_id, []).append(s.advantage)
    rewards = {gid: r for gid, _, r in worker.records}
    for gid, adv in by_gid.items():
        r = torch.tensor(rewards[gid], dtype=torch.float64)
        want = (r - r.mean()) / (r.std(unbiased=False) + 1e-8)
        assert torch.allclose(torch.tensor(adv, dtype=torch.float64), want, atol=1e-6)
    entries = logs(trainer)
    assert sum(h["dataflex/refill/rounds"] for h in entries) > 0
    assert all(h["dataflex/refill/full"] == 1.0 for h in entries)


def test_difffilter_passes_only_groups_inside_the_band(policy_dir, tmp_path, monkeypatch):
    passed = spy(monkeypatch)
    trainer, worker = run(policy_dir, tmp_path, monkeypatch, {"strategy": "difffilter"}, steps=2)
    n = BATCH // G
    decided = len(logs(trainer))  # at least one update per optimizer step
    seen = worker.records[: decided * n]
    # hand-worked: difffilter keeps a group whose solve rate is in (0.2, 0.8) (G = 4: 1 to 3
    # of 4 rewarded); the others never reach TRL
    inside = {gid for gid, _, r in seen if 0.2 < sum(r) / G < 0.8}
    got = {s.group_id for s in passed}
    assert got and got <= {gid for gid, _, r in worker.records if 0.2 < sum(r) / G < 0.8}
    assert inside <= got
    assert any(not (0.2 < sum(r) / G < 0.8) for _, _, r in seen)


def test_softmax_reweights_the_advantages_trl_trains_on(policy_dir, tmp_path, monkeypatch):
    passed = spy(monkeypatch)
    trainer, worker = run(policy_dir, tmp_path, monkeypatch, {"strategy": "softmax"}, steps=3)
    n = BATCH // G
    rewards = {gid: r for gid, _, r in worker.records}
    moved = 0
    for k in range(0, len(passed) - len(passed) % (n * G), n * G):  # one update at a time
        block = passed[k : k + n * G]
        a, informative = [], []
        for gid in dict.fromkeys(s.group_id for s in block):
            r = torch.tensor(rewards[gid], dtype=torch.float64)
            a.append((r - r.mean()) / (r.std(unbiased=False) + 1e-8))
            informative += [len(set(rewards[gid])) > 1] * G
        a, inf = torch.cat(a), torch.tensor(informative)
        # hand-worked: weights softmax(|A| / 1) over the responses of the update's informative
        # groups, mean 1 there (the preset's normalize: informative); 1 elsewhere (A = 0)
        w = torch.ones_like(a)
        w[inf] = torch.softmax(a[inf].abs(), 0) * int(inf.sum())
        got = torch.tensor([s.advantage for s in block], dtype=torch.float64)
        assert torch.allclose(got, a * w, atol=1e-5)
        moved += int(not torch.allclose(got, a, atol=1e-6))
    assert moved >= 1  # some update's advantages changed


def test_admission_drop_keeps_stale_groups_out(policy_dir, tmp_path, monkeypatch):
    passed = spy(monkeypatch)
    block = {"strategy": {"name": "fresh", "admission": {"max_staleness": 0, "past": "drop"}}}
    trainer, worker = run(policy_dir, tmp_path, monkeypatch, block, steps=4)
    entries = logs(trainer)
    # TRL's own per-sample measurement: nothing it trained on lagged the policy
    assert all(h["sample/staleness_max"] == 0 for h in entries)
    assert sum(h["dataflex/admission/dropped"] for h in entries) > 0
    # hand-worked: a group is dropped iff it was generated before the last weight sync; the
    # groups passed are whole and in queue order, the dropped ones skipped
    gids = sorted({s.group_id for s in passed})
    skipped = [g for g in range(gids[-1]) if g not in gids]
    assert skipped and all(worker.records[g][1] < worker.records[gids[-1]][1] for g in skipped)


REFUSED = [
    ({"strategy": "dump_ucb"}, "dataflex.strategy.mix", "_repeat_iterator"),
    (
        {"strategy": "configs/strategies/greso.yaml"},
        "dataflex.strategy.prerollout",
        "_repeat_iterator",
    ),
    ({"strategy": "nemotron_curriculum"}, "dataflex.strategy.curriculum", "_repeat_iterator"),
    ({"strategy": "reinforce_ada"}, "dataflex.strategy.rollouts", "_score_group"),
    (
        {"strategy": {"name": "p", "admission": {"max_staleness": 1, "past": "pace"}}},
        "dataflex.strategy.admission.past",
        "_repeat_iterator",
    ),
    (
        {"strategy": {"name": "d", "admission": {"max_staleness": {"easy": 1}}}},
        "dataflex.strategy.admission.max_staleness",
        "RolloutSample",
    ),
    ({"strategy": "high_entropy"}, "dataflex.strategy.tokens", "TreeRow.pack"),
    ({"strategy": "ar"}, "dataflex.strategy.reweight.actuator", "TreeRow.pack"),
    ({"strategy": "maxvar"}, "select.recompute_advantages", "_score_group"),
    ({"strategy": "baseline", "domain_key": "domain"}, "dataflex.domain_key", "RolloutSample"),
]


@pytest.mark.parametrize("block,key,code", REFUSED, ids=[r[1] for r in REFUSED])
def test_what_cannot_act_is_refused_naming_the_setting_and_trl_code(tmp_path, block, key, code):
    from dataflex_rl.hosts.trl import DataflexAsyncGRPOConfig, DataflexAsyncGRPOTrainer

    with pytest.raises(ConfigError, match=key) as err:
        DataflexAsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dataflex=block)
    assert code in str(err.value) and "trl/experimental/async_grpo/" in str(err.value)
    # the trainer refuses it before the model is built (the model path does not exist)
    args = DataflexAsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    with pytest.raises(ConfigError, match=key):
        DataflexAsyncGRPOTrainer(model=str(tmp_path / "no_model"), args=args, dataflex=block)


def test_tools_and_uneven_updates_are_refused_before_the_model(tmp_path):
    from dataflex_rl.hosts.trl import DataflexAsyncGRPOConfig, DataflexAsyncGRPOTrainer

    def tool(x: int) -> int:
        """A tool.

        Args:
            x: a number.
        """
        return x

    args = DataflexAsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    with pytest.raises(ConfigError, match="tools: .*_score_group"):
        DataflexAsyncGRPOTrainer(model=str(tmp_path / "no_model"), args=args, tools=[tool])
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        DataflexAsyncGRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            per_device_train_batch_size=6,
            num_generations=4,
            dataflex={"strategy": "dapo"},
        )
