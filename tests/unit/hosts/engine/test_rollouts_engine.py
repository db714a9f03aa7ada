"""Per-prompt budgets on the engine: allocated responses carry the noise a plain group would
(common random numbers across arms: the first G of a prompt are its plain group, the next G
its next occurrence), and a run saved after 3 steps and resumed trains and ends exactly as
the uninterrupted run."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.checkpoint import load_checkpoint, save_checkpoint
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config

from .test_trainer import make_trainer

pytestmark = pytest.mark.filterwarnings("ignore::dataflex_rl.core.strategy.StrategyWarning")


@pytest.fixture(scope="module")
def tasks():
    return tasks_from_config(load_config({"tasks": {"train_size": 30, "eval_size": 5}}))


def test_allocated_responses_are_the_plain_groups_responses(tasks):
    tr = make_trainer(tasks)
    problems = tasks.train[tasks.domains[0]][:3]
    G = tr.config.grpo.group_size
    plain, plain_r, _, _ = tr.generation(0).rollout(problems)
    again, again_r, _, _ = tr.generation(0).rollout(problems[:1], before=problems)
    counts = torch.tensor([2 * G, G, 2])
    got, got_r, _, _ = tr.generation(0).rollout(problems, counts=counts)
    assert got.prompt_index.tolist() == [0] * 2 * G + [1] * G + [2] * 2
    assert got.prompt_ids.shape[0] == 3
    ids = got.response_ids
    want = [plain.response_ids[:G], again.response_ids, plain.response_ids[G : 2 * G],
            plain.response_ids[2 * G : 2 * G + 2]]  # fmt: skip
    T = max(w.shape[1] for w in [*want, ids])

    def padded(t):
        return torch.nn.functional.pad(t, (0, T - t.shape[1]), value=tr.policy.tokenizer.pad_id)

    assert torch.equal(padded(ids), torch.cat([padded(w) for w in want]))
    want_r = torch.cat([plain_r[:G], again_r, plain_r[G : 2 * G], plain_r[2 * G : 2 * G + 2]])
    assert torch.equal(got_r, want_r)


def _run(trainer, n: int) -> list[tuple]:
    keys = ("train/reward", "dataflex/rollouts/generated", "dataflex/rollouts/per_prompt_max")
    return [tuple(m[k] for k in keys) for m in (trainer.train_step() for _ in range(n))]


def test_responses_given_a_few_at_a_time_are_those_of_one_generation(tasks):
    # sequential rounds: 2 + 2 + 6 responses of p0 and 2 + 3 of p1, generated in three calls,
    # are the 10 and 5 of one generation of them all (G = 4: p0's plain group, its next
    # occurrence, 2 of the one after; the rounds end inside an occurrence and go on there)
    tr = make_trainer(tasks)
    problems = tasks.train[tasks.domains[0]][:2]
    assert tr.config.grpo.group_size == 4
    whole = tr.generation(0).rollout(problems, counts=torch.tensor([10, 5]))
    gen = tr.generation(0)
    parts = [
        gen.generate(problems, [0, 0], 0, torch.tensor([2, 2])),
        gen.generate(problems, [0, 0], 1, torch.tensor([2, 3])),
        gen.generate(problems[:1], [0], 2, torch.tensor([6])),
    ]
    rows = {0: [], 1: []}
    for part, who in zip(parts, ([0, 1], [0, 1], [0])):
        rollout, rewards = part.rows.rollout, part.rows.rewards
        for r in range(rollout.response_ids.shape[0]):
            p = who[int(rollout.prompt_index[r])]
            ids = rollout.response_ids[r][rollout.response_mask[r]].tolist()
            rows[p].append((ids, float(rewards[r])))
    want = {0: [], 1: []}
    w, wr = whole[0], whole[1]
    for r in range(w.response_ids.shape[0]):
        ids = w.response_ids[r][w.response_mask[r]].tolist()
        want[int(w.prompt_index[r])].append((ids, float(wr[r])))
    assert rows == want
    # a plain group of p0 drawn after them is its fourth occurrence (10 began three)
    after = gen.generate(problems[:1], [0], 3)
    again = tr.generation(0).rollout(problems[:1], before=problems[:1] * 3)
    assert torch.equal(after.rows.rollout.response_ids, again[0].response_ids)


def test_a_sequential_step_spends_at_most_the_steps_responses_and_trains_on_all(tasks):
    tr = make_trainer(tasks, "adaptive_rollout")
    G, P = tr.config.grpo.group_size, tr.config.grpo.prompts_per_step
    for _ in range(3):
        m = tr.train_step()
        R = "dataflex/rollouts/"
        assert m[R + "generated"] <= P * G and m[R + "trained"] == m[R + "generated"]
        assert m[R + "per_prompt_min"] >= 2 and m[R + "rounds"] <= 6
        assert m[R + "zero_variance_pooled"] <= m[R + "zero_variance_first"]


@pytest.mark.parametrize("name", ["reinforce_ada", "knapsack_rl", "adaptive_rollout"])
def test_resume_after_3_steps_equals_the_uninterrupted_run(tasks, tmp_path, name):
    whole = make_trainer(tasks, name)
    ref = _run(whole, 5)
    first = make_trainer(tasks, name)
    head = _run(first, 3)
    save_checkpoint(tmp_path, first.state_dict())
    resumed = make_trainer(tasks, name)
    resumed.load_state_dict(load_checkpoint(tmp_path))
    tail = _run(resumed, 2)
    assert head + tail == ref
    assert resumed.parameter_hash() == whole.parameter_hash()
    if name == "knapsack_rl":  # the domain rates came back with it
        assert float(resumed.driver.strategy._rollouts.responses.sum()) > 0
        assert all(m[1] == 16.0 for m in ref)  # the step's 4 x G responses, shared out
