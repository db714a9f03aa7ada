"""The step, once (`Driver.step`): assembly of the trained groups, the observed batch, and a
scripted host run through draws, refill rounds and the decision."""

from __future__ import annotations

import torch

from dataflex_rl.core.batch import from_lists
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.common.intake import Intake
from dataflex_rl.hosts.common.refill import REFILL
from dataflex_rl.hosts.common.step import Generation, assemble_groups, concat_batches

T, F = True, False


def kept(*masks):
    return [torch.tensor(m, dtype=torch.bool) for m in masks]


def test_dropped_slots_take_the_refill_groups_in_order():
    # first generation: groups 0-3, 1 and 3 dropped; round 1 (groups 4-6) keeps 5 and 6
    assert assemble_groups(kept([T, F, T, F], [F, T, T]), [3]).tolist() == [0, 5, 2, 6]
    # two rounds: round 1 (4, 5) keeps 5, round 2 (6, 7) keeps 6 and is used up to it
    assert assemble_groups(kept([F, T, F, F], [F, T], [T, T]), [2, 1]).tolist() == [5, 1, 6, 3]


def test_a_short_first_generation_is_followed_by_the_leftover_refill_groups():
    # pre-rollout skipped 2 of 4 prompts: 2 groups, 1 kept; round 1 keeps 3 of 3
    assert assemble_groups(kept([T, F], [T, T, T]), [3]).tolist() == [0, 2, 3, 4]


def test_slots_without_a_refill_keep_their_dropped_group_and_no_refill_is_the_identity():
    # round 1 is groups 3, 4 and keeps 4 only
    assert assemble_groups(kept([F, F, F], [F, T]), [2]).tolist() == [4, 1, 2]
    assert assemble_groups(kept([T, F, T]), []).tolist() == [0, 1, 2]


def test_concatenated_batches_are_one_batch_of_every_group():
    a = from_lists([1.0, 0.0], [0, 0], [2, 3], advantages=[1.0, -1.0], prompt_keys=("p", "p"))
    b = from_lists(
        [1.0, 1.0, 0.0, 0.0],
        [0, 0, 1, 1],
        [1, 1, 5, 1],
        advantages=[0.0] * 4,
        prompt_keys=("q", "q", "r", "r"),
    )
    c = concat_batches([a, b])
    want = from_lists(
        [1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        [0, 0, 1, 1, 2, 2],
        [2, 3, 1, 1, 5, 1],
        advantages=[1.0, -1.0, 0.0, 0.0, 0.0, 0.0],
        prompt_keys=("p", "p", "q", "q", "r", "r"),
    )
    assert c.num_groups == 3 and c.prompt_keys == want.prompt_keys
    assert torch.equal(c.response_mask, want.response_mask)
    assert torch.equal(c.advantages, want.advantages)
    assert c.group_std.tolist() == want.group_std.tolist()


class Scripted:
    """A host whose prompt i scores rewards ``(1, 0)`` when ``signal(i)``, else ``(1, 1)``."""

    def __init__(self, signal, step):
        self.signal, self.step, self.calls = signal, step, []

    def batch(self, items, doms):
        rewards = [r for i in items for r in ((1.0, 0.0) if self.signal(i) else (1.0, 1.0))]
        return from_lists(
            rewards,
            [g for g in range(len(items)) for _ in range(2)],
            advantages=[a for i in items for a in ((1.0, -1.0) if self.signal(i) else (0, 0))],
            prompt_keys=tuple(i for i in items for _ in range(2)),
            domain_ids=torch.tensor([d for d in doms for _ in range(2)]),
            domains=("a", "b"),
            step=self.step,
        )

    def generate(self, items, doms, rnd):
        self.calls.append((rnd, list(items)))
        return Generation(self.batch(items, doms), rows=list(items), tokens=8.0 * len(items))

    group_size = 2

    def assemble(self, generations, rows, group_ids, items, doms):
        every = [i for g in generations for i in g.rows for _ in range(2)]  # per response
        assert items == [every[r] for r in rows[::2].tolist()]
        assert group_ids.tolist() == [g for g in range(len(items)) for _ in range(2)]
        return items, self.batch(items, doms)


def test_the_step_trains_on_n_assembled_groups_and_observes_every_generated_one():
    # dapo with refill on 2 domains: even prompts carry signal. The update trains on the 4
    # assembled groups (all with signal); the mixer's drawn counts and the decision log's
    # every-group view hold every generated group, the replaced ones included.
    spec = {
        "name": "d",
        "select": "dapo",
        "refill": {"max_rounds": 4},
        "mix": {"actuator": {"name": "static", "floor": 0.0}},
    }
    strategy = Strategy(spec, domains=("a", "b"))
    pools = [list(range(0, 40)), list(range(100, 140))]
    intake = Intake(pools, ("a", "b"), torch.tensor([0.5, 0.5]), seeds=(3, 3))
    d = Driver(strategy, intake)
    host = Scripted(lambda i: i % 2 == 0, step=0)
    seen = []
    decide = strategy.decide
    strategy.decide = lambda b, o=None: seen.append((b, o)) or decide(b, o)
    out = d.step(host, 4, 0)
    generated = [i for _, items in host.calls for i in items]
    batch, observed = seen[0]
    assert out.rows == [i for i in out.rows if i % 2 == 0] and len(out.rows) == 4
    assert batch.num_groups == 4 and bool(out.decision.keep_mask.all())
    assert observed.num_groups == len(generated) and list(observed.prompt_keys[::2]) == generated
    m = out.metrics
    assert m[REFILL + "full"] == 1.0
    assert m[REFILL + "groups_generated"] == len(generated)
    assert m[REFILL + "discarded"] == len(generated) - 4
    # the mixer counted every generated response (2 per group), not only the trained ones
    assert int(strategy.state_dict()["drawn"].sum()) == 2 * len(generated)
