"""The verl host's decision log, in process: verl's real replay buffer and `_compute_advantage`
(GRPO, rollout correction), then the dataflex step writes the log; replaying the strategy on it
reproduces the decision the host applied, and the log's keep mask is what reached verl."""

import pytest

verl = pytest.importorskip("verl")

from dataflex_rl.harness.replay.replay import read_log, replay  # noqa: E402
from tests.hosts.verl_helpers import dataflex_trainer, put_groups, read, sample  # noqa: E402

pytestmark = pytest.mark.usefixtures("tq_train")

MIXED = [[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]  # solve rates .5 1 0 .5


@pytest.mark.parametrize("strategy", ["difffilter", "softmax", "ragen_snr", "maxrl"])
def test_verl_log_replays_the_applied_decision(tmp_path, strategy):
    trainer = dataflex_trainer(
        f"+dataflex.strategy={strategy}",
        "+dataflex.decision_log.enabled=true",
        f"+dataflex.decision_log.dir={tmp_path}",
        "+dataflex.decision_log.steps_per_file=1",
    )
    put_groups(MIXED, rollout_log_probs=True)
    batch = sample(4)
    out = trainer._compute_advantage(batch, {})
    log = read_log(tmp_path)
    assert log.host == "verl" and log.steps["step"].tolist() == [0]
    res = replay(log, [strategy])
    assert res.overall[strategy]["exact_steps"] == 1
    c = log.columns
    assert sorted(c["group"].tolist()) == [g for g in range(4) for _ in range(4)]
    assert c["prompt_key"] is None  # prompt keys come with the intake (mix / prerollout)
    # the logged weights are what verl's loss received (over its own rollout correction)
    w = read(out, "rollout_is_weights", "response_mask")
    mask = w["response_mask"].bool()
    kept_in_verl = (w["rollout_is_weights"] * mask).sum(1) > 0
    assert kept_in_verl.tolist() == (c["keep"] & (c["weight"] > 0)).tolist()
