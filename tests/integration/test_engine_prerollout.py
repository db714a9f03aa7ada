"""Pre-rollout accounting in the embedded engine, with hand-set prompt histories.

Histories are written before the step, so which prompts are skippable and how many tokens each
one's groups used is known: skipped, replacements and tokens saved follow by hand.
"""

from __future__ import annotations

import copy

import pytest
import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.hosts.engine import generation as generation_module
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

GRESO = {
    "name": "skip",
    "prerollout": {
        "actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0, "adapt_step": 0.0}
    },
}
P = "dataflex/prerollout/"


def _trainer(
    train_size: int, factor: float, rounds: int = 8, audit: float = 0.0, **more
) -> EmbeddedTrainer:
    """An engine trainer of greso (``more``: other sections of the strategy)."""
    cfg = load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "grpo": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8},
            "tasks": {
                "domains": ["math"],
                "train_size": train_size,
                "candidate_factor": factor,
                "max_draw_rounds": rounds,
            },
            "eval": {"per_domain": 4, "samples": 1},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
        }
    )
    actuator = {**GRESO["prerollout"]["actuator"], "audit": audit}
    return EmbeddedTrainer(cfg, {**GRESO, "prerollout": {"actuator": actuator}, **more}, seed=0)


def _remember(tr: EmbeddedTrainer, key, rewards: list[float], tokens: list[int], step: int = 0):
    """One group of ``key`` with these rewards and per-response token counts."""
    tr.driver.strategy.history.update(
        from_lists(
            rewards, [0] * len(rewards), tokens, prompt_keys=(key,) * len(rewards), step=step
        )
    )


def _candidates(tr: EmbeddedTrainer, n: int) -> list:
    """The keys the trainer's sampler will draw next, in order (from a copy of it)."""
    sampler = copy.deepcopy(tr.driver.intake.sampler)
    drawn, _ = sampler.sample(torch.ones(1, dtype=torch.float64), n)
    return [tr.taskset.train["math"][i].key for _, i in drawn]


def test_skipped_and_tokens_saved():
    tr = _trainer(train_size=8, factor=2.0, rounds=1)  # one round of 8 candidates
    keys = _candidates(tr, 8)
    # keys[0] all-correct twice: 8 then 24 tokens -> mean 16; keys[1] all-wrong once: 6 tokens
    _remember(tr, keys[0], [1.0, 1.0], [4, 4])
    _remember(tr, keys[0], [1.0, 1.0], [12, 12], step=1)
    _remember(tr, keys[1], [0.0, 0.0, 0.0], [2, 2, 2])
    _remember(tr, keys[2], [1.0, 0.0], [50, 50])  # mixed: never skipped
    m = tr.train_step()  # keys[3] was never seen; keys 4, 5 replace 0, 1
    assert m[P + "active"] == 1.0
    assert m[P + "skipped"] == 2.0 and m["engine/prompts_generated"] == 4.0
    assert m[P + "replacements"] == 2.0 and m[P + "forced"] == 0.0
    assert m[P + "tokens_saved_est"] == 16.0 + 6.0
    # seconds: tokens saved x this step's generation seconds per generated token
    assert m[P + "seconds_saved_est"] == pytest.approx(
        22.0 * m["time/generate_s"] / m["engine/tokens_generated"]
    )
    assert 0.0 <= m[P + "zero_variance_through"] <= 1.0


def _generated(tr: EmbeddedTrainer, monkeypatch) -> list[list]:
    """The prompt keys of every generation call of the trainer (the audit's last)."""
    calls: list[list] = []
    rollout = generation_module.EngineGeneration.rollout

    def spy(self, problems, before=(), counts=None, offsets=None):
        calls.append([p.key for p in problems])
        return rollout(self, problems, before, counts, offsets)

    monkeypatch.setattr(generation_module.EngineGeneration, "rollout", spy)
    return calls


def test_when_the_rounds_run_out_skipped_prompts_fill_the_batch(monkeypatch):
    """``max_draw_rounds`` means the same on every host: the engine trains on a full batch
    as verl and TRL do (it used to leave the batch short: 2 prompts here, 0 saved of 4)."""
    tr = _trainer(train_size=4, factor=1.0, rounds=1)
    keys = _candidates(tr, 4)
    _remember(tr, keys[0], [1.0, 1.0], [4, 4])
    _remember(tr, keys[1], [0.0, 0.0], [3, 3])
    calls = _generated(tr, monkeypatch)
    m = tr.train_step()
    # one round: keys 0 and 1 are skipped and there is no other candidate: they fill the
    # batch again, the plain batch, so nothing is skipped or saved
    assert calls == [keys]
    assert m["engine/prompts_generated"] == 4.0 and m[P + "forced"] == 2.0
    assert m[P + "candidates_skipped"] == 2.0 and m["engine/prompts_skipped"] == 0.0
    assert m[P + "skipped"] == 0.0 and m[P + "replacements"] == 0.0
    assert m[P + "tokens_saved_est"] == 0.0


def test_the_audit_generates_skipped_prompts_apart_and_others_fill_the_batch(monkeypatch):
    """The engine's false-skip audit with a full batch: the audited prompts (every skipped
    one of the plain batch at audit 1) are generated apart and not trained on, and the
    batch is filled with skipped prompts that are not audited."""
    tr = _trainer(train_size=8, factor=1.0, rounds=2, audit=1.0)
    keys = _candidates(tr, 8)  # round 1: keys 0-3; round 2: the 2 missing, keys 4 and 5
    for k in (keys[0], keys[1], keys[4], keys[5]):
        _remember(tr, k, [1.0, 1.0], [2, 2])
    calls = _generated(tr, monkeypatch)
    m = tr.train_step()
    # audited: 0 and 1 (the plain batch's skipped); the batch: 2, 3 kept, 4, 5 forced in
    assert calls == [[keys[2], keys[3], keys[4], keys[5]], [keys[0], keys[1]]]
    assert m[P + "audited"] == 2.0 and m[P + "audit_groups"] == 2.0
    assert m[P + "forced"] == 2.0 and m[P + "rounds"] == 2.0
    assert m[P + "skipped"] == 2.0 and m[P + "replacements"] == 2.0
    assert m["engine/prompts_generated"] == 4.0 and m["engine/tokens_audit"] > 0


def test_refill_rounds_audit_too_and_every_audit_counted_is_generated(monkeypatch):
    """Every draw of a step audits, refill rounds included, and the engine generates every
    audited prompt once the step's draws are done: counted == generated."""
    tr = _trainer(32, 1.0, rounds=2, audit=1.0, select="dapo", refill={"max_rounds": 1})
    keys = _candidates(tr, 32)
    for k in keys:  # every prompt is skippable: each draw's plain batch is audited whole
        _remember(tr, k, [1.0, 1.0], [2, 2])
    G = tr.config.grpo.group_size

    def score(taskset, problems, texts):  # the first generation: 2 of 4 groups with signal
        row = torch.arange(len(texts))
        first = len(calls) == 1
        return (first & (row // G < 2) & (row % 2 == 1)).to(torch.float32)

    monkeypatch.setattr(generation_module, "score", score)
    calls = _generated(tr, monkeypatch)
    m = tr.train_step()
    # the first draw audits its plain batch (keys 0-3) and is filled with keys 4-7; the
    # refill round draws the 2 missing: audits keys 8, 9 and generates 10, 11; then the 6
    # audited prompts are generated together
    assert calls == [keys[4:8], keys[10:12], keys[0:4] + keys[8:10]]
    assert m["dataflex/refill/rounds"] == 1.0
    assert m[P + "audited"] == 6.0 == m[P + "audit_groups"]
    assert m["engine/tokens_audit"] > 0


def test_replacements_keep_the_batch_full():
    tr = _trainer(train_size=8, factor=2.0)
    keys = _candidates(tr, 8)  # the first 4 are the plain batch, the rest replacements
    _remember(tr, keys[1], [1.0, 1.0], [3, 5])  # 8 tokens
    _remember(tr, keys[3], [0.0, 0.0], [10, 10])  # 20 tokens
    _remember(tr, keys[5], [1.0, 1.0], [1, 1])  # a skipped spare: saves nothing
    m = tr.train_step()
    assert m["engine/prompts_generated"] == 4.0  # full: keys 0, 2, 4, 6
    assert m[P + "skipped"] == 2.0  # keys 1 and 3 of the plain batch
    assert m[P + "candidates_skipped"] == 3.0
    assert m[P + "replacements"] == 2.0  # keys 4 and 6
    assert m[P + "tokens_saved_est"] == 28.0


def test_a_second_round_replaces_the_skipped_prompts():
    tr = _trainer(train_size=8, factor=1.0)
    keys = _candidates(tr, 8)  # round 1 draws keys 0-3, round 2 the 2 missing: 4, 5
    _remember(tr, keys[1], [1.0, 1.0], [3, 5])  # 8 tokens
    _remember(tr, keys[3], [0.0, 0.0], [10, 10])  # 20 tokens
    m = tr.train_step()
    assert m["engine/prompts_generated"] == 4.0 and m[P + "rounds"] == 2.0
    assert m[P + "candidates"] == 6.0 and m["engine/prompts_skipped"] == 2.0
    assert m[P + "skipped"] == 2.0 and m[P + "replacements"] == 2.0
    assert m[P + "tokens_saved_est"] == 28.0 and m[P + "forced"] == 0.0


def test_zero_variance_through_is_the_share_of_generated_zero_variance_groups(monkeypatch):
    tr = _trainer(train_size=4, factor=1.0)
    seen = {}
    orig = generation_module.grpo_batch

    def spy(*args, **kwargs):
        b = orig(*args, **kwargs)
        seen["share"] = float((b.group_std == 0).float().mean())
        return b

    monkeypatch.setattr(generation_module, "grpo_batch", spy)
    m = tr.train_step()
    assert m[P + "zero_variance_through"] == seen["share"]
    assert m[P + "skipped"] == 0.0 and m[P + "tokens_saved_est"] == 0.0
