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


@pytest.mark.parametrize("name", ["reinforce_ada", "knapsack_rl"])
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
