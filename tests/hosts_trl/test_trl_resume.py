"""Strategy and intake state in TRL checkpoints: 4 steps straight equal 2 steps, a new trainer
resumed from ``checkpoint-2``, and 2 more: the same draws, decisions, strategy state and
model parameters. The state file is the project's safe format (no pickle)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.hosts.common.state import load_state  # noqa: E402
from tests.hosts_trl.trainers import Recorder, dataflex_trainer  # noqa: E402
from tests.states import is_state_file  # noqa: E402

#: select + mix + prerollout + refill: every piece of state (histories, proportions, intake
#: RNG, which the refill rounds draw from too)
SPEC = {
    "select": {"preset": "difffilter"},
    "refill": {"max_rounds": 2},
    "mix": {"preset": "reward_gap", "warmup_steps": 0, "every": 1},
    "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.5, "min_explore": 0.1}},
}


def _run(out, resume=None, stop_at=None):
    """4 steps (the LR schedule's length), or stopped after step ``stop_at`` as if killed."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == stop_at:
                control.should_training_stop = True

    trainer = dataflex_trainer(out, SPEC, max_steps=4, save_strategy="steps", save_steps=2)
    trainer.add_callback(Stop())
    rec = Recorder(trainer)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, rec


def _same_state(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_resume_continues_exactly(tmp_path):
    straight, rec = _run(tmp_path / "straight")
    _run(tmp_path / "split", stop_at=2)
    ckpt = tmp_path / "split" / "checkpoint-2"
    assert is_state_file(ckpt / "dataflex_state.safetensors")
    assert load_state(ckpt / "dataflex_state.safetensors")["decisions"] == 2
    resumed, rec2 = _run(tmp_path / "split", resume=str(ckpt))
    assert resumed.driver.decisions == straight.driver.decisions == 4
    # every draw after the checkpoint, the refill rounds' included, is the straight run's
    assert len(rec2.draws) > 2
    assert [d[0] for d in rec2.draws] == [d[0] for d in rec.draws[-len(rec2.draws) :]]
    for a, b in zip(rec.decisions[2:], rec2.decisions):
        assert torch.equal(a.keep_mask, b.keep_mask)
        assert torch.equal(a.weights_per_response, b.weights_per_response)
    _same_state(straight.driver.state_dict(), resumed.driver.state_dict())
    for (name, p), q in zip(straight.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(p, q), name
