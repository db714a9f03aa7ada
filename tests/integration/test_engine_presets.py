"""Every preset, a few steps through the real engine (shipped tiny policy, real tasks).

Each test checks that the decision acted at its point in the step: select removed responses
from the loss, reweight changed their weights, mix changed what the domain sampler was asked
for, prerollout changed which prompts were generated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from dataflex_rl.presets import PRESETS
from tests.unit.test_metrics_doc import documented_keys, matches

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = str(ROOT / "configs" / "strategies" / "everything.yaml")

SELECT = {"difffilter", "maxvar", "gfpo", "topk", "ragen_snr"}
REWEIGHT = {"softmax", "per", "diffband", "ar", "maxrl"}
MIX = {"static", "reward_gap", "dump_ucb", "tscl"}
TOKENS = {"high_entropy", "dapo_entropy"}


def small_config(**overrides):
    data = {
        "policy": "tiny",
        "steps": 3,
        "threads": 1,
        "grpo": {"prompts_per_step": 8, "group_size": 8},
        "tasks": {"train_size": 60},
        "eval": {"per_domain": 10, "samples": 1},
        "log": {"progress": False, "plots": False, "checkpoint_every": 0},
    }
    for key, value in overrides.items():
        if isinstance(value, dict):
            data.setdefault(key, {}).update(value)
        else:
            data[key] = value
    return load_config(data)


class Recorder:
    """Wraps a trainer's update and domain sampler to record what they were given."""

    def __init__(self, trainer: EmbeddedTrainer) -> None:
        self.updates: list[dict] = []
        self.proportions: list[torch.Tensor] = []
        learn, quota = trainer.learner.learn, trainer.driver.intake.sampler.quota

        def _update(rollout, advantages, decision, step):
            self.updates.append(
                {
                    "response_mask": rollout.response_mask.clone(),
                    "advantages": advantages.clone(),
                    "weights": decision.weights_per_token.clone(),
                    "mask": decision.denominator_mask.clone(),
                }
            )
            return learn(rollout, advantages, decision, step)

        def _quota(proportions, n, paused=None):  # every draw asks the sampler for its quota once
            self.proportions.append(proportions.clone().double())
            return quota(proportions, n, paused)

        trainer.learner.learn = _update
        trainer.driver.intake.sampler.quota = _quota


def run_steps(strategy, steps, **overrides):
    tr = EmbeddedTrainer(small_config(**overrides), strategy, seed=0)
    rec = Recorder(tr)
    metrics = [tr.train_step() for _ in range(steps)]
    return tr, rec, metrics


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_acts_in_the_engine(name):
    steps = 8 if name in MIX else 3
    tr, rec, metrics = run_steps(name, steps)
    assert len(rec.updates) == steps
    for m in metrics:
        assert all(isinstance(v, (int, float)) for v in m.values())
    if name == "baseline":
        for u in rec.updates:
            # every valid token counts with weight 1
            assert torch.equal(u["weights"] > 0, u["response_mask"])
            assert bool((u["weights"][u["response_mask"]] == 1).all())
    elif name in SELECT:
        dropped = [
            ((u["weights"] == 0) & u["response_mask"]).all(1) & u["response_mask"].any(1)
            for u in rec.updates
        ]
        assert any(bool(d.any()) for d in dropped), "no response was removed from the loss"
    elif name in TOKENS:
        # rows in the loss keep some of their tokens, not all: weight 0 on the others
        for u in rec.updates:
            w, valid = u["weights"], u["response_mask"]
            rows = (w > 0).any(1)
            assert bool(rows.any()) and bool(((w == 0) & valid)[rows].any())
    elif name in REWEIGHT:
        # weights of the tokens that carry a signal (non-zero advantage) are not all equal
        w = torch.cat(
            [u["weights"][u["response_mask"] & (u["advantages"] != 0)] for u in rec.updates]
        )
        assert float(w.std()) > 0, "weights are all equal"
    elif name in MIX:
        assert len(rec.proportions) == steps
        assert torch.allclose(rec.proportions[-1], tr.driver.strategy.proportions)
        if name != "static":
            uniform = torch.full_like(rec.proportions[-1], 1 / 3)
            assert not torch.allclose(rec.proportions[-1], uniform, atol=1e-3), (
                "the sampler never saw adapted proportions"
            )


def test_select_with_renormalize_changes_the_loss_denominator():
    _, rec, _ = run_steps("difffilter", 3)
    # difffilter renormalizes: the loss mask is the kept tokens only
    assert any(int(u["mask"].sum()) < int(u["response_mask"].sum()) for u in rec.updates)


def test_prerollout_changes_what_is_generated():
    spec = {"name": "skip", "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0}}}
    # a 4-prompt pool per domain: prompts repeat at once, so histories fill up; one round of
    # 2 candidates per slot: later candidates replace skipped prompts of the plain batch, and
    # skipped ones fill what is left, so every batch is full
    tasks = {"train_size": 4, "candidate_factor": 2.0, "max_draw_rounds": 1}
    tr, _, metrics = run_steps(spec, 6, tasks=tasks)
    total = {
        k: sum(m.get(f"dataflex/prerollout/{k}", 0) for m in metrics)
        for k in ("skipped", "replacements", "forced")
    }
    assert total["skipped"] > 0 and total["replacements"] == total["skipped"]
    assert total["forced"] > 0  # the round ran out: skipped prompts filled the batch
    assert [m["engine/prompts_generated"] for m in metrics] == [8] * 6


def test_prerollout_with_candidate_factor_fills_the_batch():
    spec = {"name": "skip", "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0}}}
    # 8 prompts per domain: from the 2nd step on every candidate has a history
    _, _, metrics = run_steps(spec, 5, tasks={"train_size": 8, "candidate_factor": 3.0})
    assert all(m["engine/prompts_generated"] == 8 for m in metrics)
    assert sum(m.get("dataflex/prerollout/candidates_skipped", 0) for m in metrics) > 0


def test_composed_strategy_file_runs():
    tr, rec, metrics = run_steps(EVERYTHING, 3)
    assert len(metrics) == 3 and tr.step == 3
    documented = documented_keys()  # four mechanisms: every key is in docs/metrics.md
    assert not [k for m in metrics for k in m if k != "step" and not matches(k, documented)]
    assert "dataflex/mix/domain/math/target" in metrics[0]
