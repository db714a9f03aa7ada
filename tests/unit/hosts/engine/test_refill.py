"""The engine refills (dynamic sampling): round r draws exactly the groups still missing,
generates them, and the step trains on every kept group; state resumes exactly."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine import generation as generation_module
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config

from .test_trainer import make_trainer

R = "dataflex/refill/"


@pytest.fixture(scope="module")
def tasks():
    return tasks_from_config(load_config({"tasks": {"train_size": 30, "eval_size": 5}}))


def planted(signal_per_call: list[int]):
    """A stand-in verifier: in its c-th call the first ``signal_per_call[c]`` groups get
    rewards alternating 0, 1 (signal), every other group 0 (zero variance)."""
    calls = []

    def score(taskset, problems, texts):
        c = len(calls)
        calls.append([p.key for p in problems])
        G = 4
        n = signal_per_call[c] if c < len(signal_per_call) else 0
        row = torch.arange(len(texts))
        return ((row // G < n) & (row % 2 == 1)).to(torch.float32)

    return score, calls


def test_round_two_draws_exactly_the_zero_variance_groups_and_the_limit_stops_it(
    tasks, monkeypatch
):
    # 4 prompts: 2 with signal; round 1 draws 2 (1 with signal), rounds 2 and 3 draw 1 each
    # (none): the limit (3) leaves the step one group short
    score, calls = planted([2, 1])
    monkeypatch.setattr(generation_module, "score", score)
    tr = make_trainer(tasks, {"name": "d", "select": "dapo", "refill": {"max_rounds": 3}})
    draws = []
    draw = tr.driver.draw
    tr.driver.draw = lambda n, step: draws.append(n) or draw(n, step)
    m = tr.train_step()
    assert draws == [4, 2, 1, 1] and [len(c) for c in calls] == [16, 8, 4, 4]
    assert m[R + "rounds"] == 3.0 and m[R + "prompts_drawn"] == 4.0
    assert m[R + "groups_kept"] == 3.0 and m[R + "missing"] == 1.0 and m[R + "full"] == 0.0
    assert m[R + "overgeneration"] == 2.0 and m["engine/prompts_generated"] == 8.0
    assert m[R + "zero_variance_before"] == 0.5 and m[R + "zero_variance_after"] == 0.25
    # the decision covers the 4 assembled groups: the first generation's 2 kept, round 1's
    # kept group in the first dropped slot, the last slot's dropped group: 3 kept of 4
    assert m["dataflex/kept_group_fraction"] == pytest.approx(3 / 4)
    assert m[R + "discarded"] == 4.0  # one replaced slot and rounds 1-3's 3 dropped groups
    assert m["engine/groups_effective"] == 3.0
    # every round's tokens are generation cost (what budget.generated_tokens counts)
    assert m["engine/generation_cost_tokens"] == m["engine/tokens_generated"] > 0
    assert tr.cost_tokens == m["engine/generation_cost_tokens"]


def test_a_full_first_round_draws_nothing_more(tasks, monkeypatch):
    score, calls = planted([4])
    monkeypatch.setattr(generation_module, "score", score)
    m = make_trainer(tasks, "dapo").train_step()
    assert len(calls) == 1 and m[R + "rounds"] == 0.0 and m[R + "full"] == 1.0


def _text_parity(taskset, problems, texts):
    # a stateless stand-in verifier with signal: reward 1 for an odd-length response
    return torch.tensor([float(len(t) % 2) for t in texts])


@pytest.mark.parametrize("preset", ["dapo", "dapo_entropy"])
def test_state_round_trip_continues_identically(tasks, monkeypatch, preset):
    monkeypatch.setattr(generation_module, "score", _text_parity)
    a = make_trainer(tasks, preset)
    for _ in range(2):
        a.train_step()
    state = a.state_dict()
    b = make_trainer(tasks, preset)
    b.load_state_dict(state)
    ma, mb = a.train_step(), b.train_step()
    assert a.parameter_hash() == b.parameter_hash()
    assert {k: v for k, v in ma.items() if k.startswith(R)} == {
        k: v for k, v in mb.items() if k.startswith(R)
    }
    assert ma["engine/generation_cost_tokens_total"] == mb["engine/generation_cost_tokens_total"]


def test_refill_composes_with_mixing_and_prerollout(tasks, monkeypatch):
    # dapo + a static mix + greso: refill draws follow the mix and pass the skip policy;
    # the step's prerollout counts add up over its draws
    monkeypatch.setattr(generation_module, "score", _text_parity)
    spec = {
        "name": "mixed",
        "select": "dapo",
        "refill": {"max_rounds": 2},
        "mix": {"actuator": {"name": "static", "floor": 0.0}, "prior": [1.0, 0.0, 0.0]},
        "prerollout": {"actuator": "greso"},
    }
    tr = make_trainer(tasks, spec)
    domains = []
    draw = tr.driver.draw

    def spy(n, step):
        out = draw(n, step)
        domains.extend(out[1])
        return out

    tr.driver.draw = spy
    rounds = []
    for _ in range(3):
        m = tr.train_step()
        rounds.append(m[R + "rounds"])
    assert sum(rounds) > 0 and len(domains) > 3 * 4  # refills ran
    assert set(domains) == {0}  # every draw, refills included, from the only domain mixed in
    assert m["dataflex/prerollout/candidates"] >= m["engine/prompts_generated"]


def test_overdraw_trains_on_the_groups_up_to_the_last_needed_one(tasks, monkeypatch):
    # 4 prompts, 1 with signal: overdraw asks 3 x 4 / 1 = 12, at most 4; all 4 have signal,
    # the step needs 3: they take the 3 dropped slots, so it trains on 4 groups; the 3
    # replaced groups and the 4th refill group are generated (and observed) only
    score, calls = planted([1, 4])
    monkeypatch.setattr(generation_module, "score", score)
    spec = {"name": "o", "select": "dapo", "refill": {"max_rounds": 3, "overdraw": True}}
    tr = make_trainer(tasks, spec)
    seen = []
    decide = tr.driver.strategy.decide
    tr.driver.strategy.decide = lambda b, o=None: seen.append(b.num_groups) or decide(b, o)
    m = tr.train_step()
    assert [len(c) for c in calls] == [16, 16] and seen == [4]
    assert m[R + "discarded"] == 4.0 and m[R + "full"] == 1.0 and m[R + "groups_kept"] == 4.0
    assert m["engine/prompts_generated"] == 8.0
    # the discarded group's tokens are generation cost all the same
    assert m["engine/generation_cost_tokens"] == m["engine/tokens_generated"]
    # (16 discarded rows of >= 1 token each beyond the 16 trained rows)
    assert m["engine/tokens_generated"] >= m["train/response_length"] * 16 + 16 - 1e-3


def test_dapo_and_high_entropy_in_one_strategy_refill_then_select_tokens(tasks, monkeypatch):
    # preset dapo_entropy over three steps (4 prompts of 4 responses each): step 0's first
    # generation has 2 groups with signal, its overdraw round draws 2 x 4 / 2 = 4 and its 2
    # kept groups take the 2 dropped slots (the other 2 generated, not trained on); step 1
    # has 1, draws min(3 x 4 / 1, 4) = 4 and takes 3 of them; step 2 is full at once. Each step then keeps the top 20% of the
    # kept groups' tokens by the sampler's entropy, and the loss is averaged over every
    # token of the kept groups (the engine's informative-token-mean: of the responses that
    # carry a gradient)
    score, calls = planted([2, 2, 1, 4, 4])
    monkeypatch.setattr(generation_module, "score", score)
    tr = make_trainer(tasks, "dapo_entropy")
    seen = []
    decide = tr.driver.strategy.decide
    tr.driver.strategy.decide = lambda b, o=None: seen.append((b, decide(b, o))) or seen[-1][1]
    learned = []
    learn = tr.learner.learn
    tr.learner.learn = lambda *a: learned.append(a) or learn(*a)
    ms = [tr.train_step() for _ in range(3)]
    assert [len(c) for c in calls] == [16, 16, 16, 16, 16]
    assert [m[R + "rounds"] for m in ms] == [1.0, 1.0, 0.0]
    assert [m[R + "full"] for m in ms] == [1.0] * 3
    assert [m[R + "discarded"] for m in ms] == [4.0, 4.0, 0.0]
    assert [b.num_groups for b, _ in seen] == [4, 4, 4]
    for (b, d), (_, adv, learned_d, _), m in zip(seen, learned, ms):
        assert learned_d is d
        weights, mask = d.weights_per_token, d.denominator_mask
        groups = b.group_std > 0  # the groups with signal: dapo's
        rows = groups.index_select(0, b.group_ids)
        assert int(groups.sum()) == 4
        assert torch.equal(d.loss_rows, rows)
        # the oracle: torch.quantile over the kept groups' valid tokens only
        pool = b.response_mask & rows[:, None]
        threshold = torch.quantile(b.entropies[pool], 0.8)
        expected = pool & (b.entropies >= threshold)
        assert torch.equal(d.token_keep_mask, expected)
        assert 0.2 <= int(expected.sum()) / int(pool.sum()) < 0.4
        # what the learner got: weight 1 on the kept tokens only, the kept groups' tokens
        # as the denominator
        assert torch.equal(weights > 0, expected) and bool((weights[expected] == 1).all())
        assert torch.equal(mask, pool)
        with_gradient = ((adv * weights != 0) & pool).any(1)
        assert bool(with_gradient.any()) and not bool(with_gradient[~rows].any())
        assert m["engine/loss_tokens"] == float(pool[with_gradient].sum())
        assert m["dataflex/tokens/active"] == 1.0


def test_the_decision_log_holds_every_generated_group_and_the_cost_reconciles(
    tasks, monkeypatch, tmp_path
):
    # step 0 as above: 4 generated (1 with signal), an overdraw round of 4 (all with signal)
    # whose first 3 take the 3 dropped slots: 4 decided, the 3 replaced groups and the
    # round's 4th discarded; step 1 is full at once
    import pyarrow.parquet as pq

    from dataflex_rl.hosts.engine.policy import build_tiny_policy
    from dataflex_rl.hosts.engine.tokenizer import CharTokenizer
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    from .conftest import SMALL_ARCH

    score, calls = planted([1, 4, 4])
    monkeypatch.setattr(generation_module, "score", score)
    spec = {"name": "o", "select": "dapo", "refill": {"max_rounds": 3, "overdraw": True}}
    config = load_config(
        {
            "grpo": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4},
            "tasks": {"train_size": 30, "eval_size": 5},
            "decision_log": {"enabled": True},
        }
    )
    policy = build_tiny_policy(CharTokenizer.from_charset(tasks.charset()), 0, **SMALL_ARCH)
    tr = EmbeddedTrainer(config, spec, taskset=tasks, policy=policy, out_dir=tmp_path)
    ms = [tr.train_step() for _ in range(2)]
    tr.driver.close()
    log = tr.driver.log.folder
    resp = pq.read_table(log / "responses").to_pydict()
    steps = pq.read_table(log / "steps").to_pydict()
    groups = {(s, g) for s, g in zip(resp["step"], resp["group"])}
    # every generated group is logged once, and the generation cost reconciles exactly
    assert len(groups) == sum(m["engine/prompts_generated"] for m in ms) == 12
    real = [not p for p in resp["is_padding"]]
    tokens = sum(n for n, r in zip(resp["length"], real) if r)
    assert tokens == sum(m["engine/tokens_generated"] for m in ms)
    assert len(resp["step"]) == 12 * 4
    # step 0: decided groups 0 (the first generation's) and 1-3 (the round's); discarded 4-6
    # (the replaced groups of the first generation) and 7 (the round's 4th)
    rows0 = [i for i, s in enumerate(resp["step"]) if s == 0]
    by_group = {resp["group"][i]: (resp["refill_round"][i], resp["discarded"][i]) for i in rows0}
    assert by_group == {
        0: (0, False), 1: (1, False), 2: (1, False), 3: (1, False),
        4: (0, True), 5: (0, True), 6: (0, True), 7: (1, True),
    }  # fmt: skip
    gone = [i for i in rows0 if resp["discarded"][i]]
    assert len(gone) == 16 and not any(resp["keep"][i] for i in gone)
    assert all(resp["weight"][i] == 0.0 and resp["kept_tokens"][i] == 0 for i in gone)
    assert all(resp["decision_advantage"][i] is None for i in gone)
    assert steps["groups"] == [4, 4] and steps["discarded_groups"] == [4, 0]
    assert steps["discarded_responses"] == [16, 0]
    assert steps["tokens"][0] + steps["discarded_tokens"][0] == ms[0]["engine/tokens_generated"]
    assert ms[0][R + "discarded"] == 4.0
    # replay reads the decided rows only and says what it leaves out
    from dataflex_rl.harness.replay.replay import read_log, signal_notes

    replayed = read_log(log)
    assert len(replayed.columns["keep"]) == (4 + 4) * 4
    assert replayed.batch(0).num_groups == 4
    notes = " ".join(signal_notes(tr.driver.strategy, replayed))
    assert "4 discarded groups" in notes and "carry no decision" in notes
