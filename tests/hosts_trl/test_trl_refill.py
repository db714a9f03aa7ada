"""Refill on real TRL: the dropped groups of a generation batch are replaced by refill rounds
that TRL itself generates, the batch TRL trains on is assembled from them, and the decision
covers exactly that batch, across steps_per_generation and gradient accumulation."""

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from tests.hosts_trl.tiny import tiny_dataset  # noqa: E402
from tests.hosts_trl.trainers import (  # noqa: E402
    Recorder,
    dataflex_trainer,
    logged,
    record_trl_generations,
)

R = "dataflex/refill/"


def dapo(rounds=4, overdraw=False):
    return {
        "name": "dapo_test",
        "select": {"preset": "dapo"},
        "refill": {"max_rounds": rounds, "overdraw": overdraw},
    }


@pytest.mark.parametrize("spg", [None, 4])
def test_refill_replaces_dropped_groups_with_trls_own_generations(tmp_path, monkeypatch, spg):
    # 4 prompts x G = 4 per generation; with steps_per_generation 4 (and GA 2) one
    # generation of 32 rows feeds 4 micro-steps (8 prompts)
    extra = {} if spg is None else {"steps_per_generation": spg}
    ds = tiny_dataset()
    trainer = dataflex_trainer(tmp_path, dapo(), dataset=ds, max_steps=2, **extra)
    rec = Recorder(trainer)
    trl_saw = record_trl_generations(monkeypatch, trainer)
    trainer.train()
    rounds = logged(trainer, R + "rounds")
    gens = len(rec.decisions)
    assert len(rounds) == gens and sum(rounds) > 0, rounds
    assert len(trl_saw) == gens + sum(rounds)  # TRL generated every refill round itself
    G = 4
    i = 0
    for batch, decision, out, r, kept, full in zip(
        rec.batches,
        rec.decisions,
        rec.outs,
        rounds,
        logged(trainer, R + "groups_kept"),
        logged(trainer, R + "full"),
    ):
        first, refills = trl_saw[i], trl_saw[i + 1 : i + 1 + int(r)]
        i += 1 + int(r)
        S = batch.num_groups
        names = [ds[int(batch.prompt_keys[g * G])]["pid"] for g in range(S)]
        # TRL's own advantages say which groups had no signal (all 0: zero variance)
        dropped = (first["advantages"].view(S, G) == 0).all(1)
        signal = [
            saw["pids"][g * G]
            for saw in refills
            for g in range(len(saw["pids"]) // G)
            if not (saw["advantages"].view(-1, G)[g] == 0).all()
        ]
        replaced = [g for g in range(S) if names[g] != first["pids"][g * G]]
        # kept groups stay in their slots; dropped slots take the refill groups with signal,
        # in the order TRL generated them, while there are any
        assert all(bool(dropped[g]) for g in replaced)
        assert len(replaced) == min(int(dropped.sum()), len(signal))
        assert [names[g] for g in replaced] == signal[: len(replaced)]
        keep = decision.keep_mask.view(S, G).all(1)
        assert int(keep.sum()) == kept and (full == 1.0) == bool(keep.all())
        # the rows TRL trains on follow the decision (dropped rows out of the loss)
        rows = decision.keep_mask
        assert out["completion_mask"][~rows].sum() == 0
        assert torch.equal(out["completion_mask"][rows].sum(1), batch.response_length[rows])
        assert int(out["num_items_in_batch"]) == int(batch.response_length[rows].sum())
    assert len(logged(trainer, "loss")) == 2


def test_the_decision_log_holds_every_group_trl_generated(tmp_path, monkeypatch):
    # the assembled batch is decided on; the groups it does not hold (dropped slots' groups
    # that refill groups replaced, refill groups dropped or past the last one needed) are
    # logged as discarded, so the log's groups and tokens are exactly what TRL generated
    import pyarrow.parquet as pq

    ds = tiny_dataset()
    block = {"strategy": dapo(overdraw=True), "decision_log": {"enabled": True}}
    trainer = dataflex_trainer(tmp_path, block, dataset=ds, max_steps=3)
    trl_saw = record_trl_generations(monkeypatch, trainer)
    trainer.train()
    resp = pq.read_table(trainer.driver.log.folder / "responses").to_pydict()
    steps = pq.read_table(trainer.driver.log.folder / "steps").to_pydict()
    G = 4
    assert sum(steps["discarded_groups"]) > 0
    first = {}  # the first row of each logged group
    for row, key in enumerate(zip(resp["step"], resp["group"])):
        first.setdefault(key, row)
    logged_pids = sorted(ds[int(resp["prompt_key"][r])]["pid"] for r in first.values())
    generated = sorted(pid for saw in trl_saw for pid in saw["pids"][::G])
    assert logged_pids == generated
    real = [not p for p in resp["is_padding"]]
    assert sum(n for n, r in zip(resp["length"], real) if r) == sum(s["tokens"] for s in trl_saw)
    decided = [not d for d in resp["discarded"]]
    assert sum(decided) == sum(steps["responses"])  # the decided rows: N per step
    assert max(resp["refill_round"]) >= 1


def test_a_round_limit_leaves_the_step_short_and_says_so(tmp_path):
    # a reward that never varies: every group is dropped, every round too; the limit (2)
    # ends the step with nothing kept
    def flat(prompts, completions, **_):
        return [1.0] * len(prompts)

    trainer = dataflex_trainer(tmp_path, dapo(rounds=2), reward=flat, max_steps=1)
    trl_saw = []
    from trl import GRPOTrainer  # TRL's own generation, which the host's step calls

    generate = GRPOTrainer._generate_and_score_completions

    def count(self, inputs):
        trl_saw.append(len(inputs))
        return generate(self, inputs)

    GRPOTrainer._generate_and_score_completions = count
    try:
        trainer.train()
    finally:
        GRPOTrainer._generate_and_score_completions = generate
    # first generation 16 rows, then 2 rounds of the 4 missing prompts x G
    assert trl_saw == [16, 16, 16]
    assert logged(trainer, R + "rounds") == [2.0] and logged(trainer, R + "missing") == [4.0]
    assert logged(trainer, R + "full") == [0.0] and logged(trainer, R + "overgeneration") == [3.0]
