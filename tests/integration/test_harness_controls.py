"""``dataflex-rl compare --control`` on the real engine: the no-update arm never moves its
parameters, the A/A arm is paired with the baseline, the report lists the controls."""

import json

import pytest

from tests.harness_cli import run_cli

pytest.importorskip("transformers")


def test_controls_on_the_real_engine(tmp_path, capsys):
    from dataflex_rl.hosts.engine.policy import load_policy, parameter_hash

    exp = tmp_path / "tiny.yaml"
    # the shipped warm-started policy, so that groups have signal and the baseline moves;
    # two domains and small pools keep it fast
    exp.write_text("""\
name: controls
strategies: [baseline]
seeds: 2
controls: [aa]
engine: {policy: tiny, tasks: {domains: [logic, science], train_size: 200, eval_size: 40}}
budget: {steps: 3, prompts_per_step: 4, samples_per_prompt: 4}
evaluation: {every: 0, per_domain: 20}
statistics: {n_boot: 500}
""")
    out = tmp_path / "out"
    assert (
        run_cli(
            [
                "compare",
                str(exp),
                "--out",
                str(out),
                "--workers",
                "2",
                "--no-progress",
                "--no-plots",
                "--control",
                "no_update",
            ]
        )
        == 0
    )
    initial = parameter_hash(load_policy("tiny").model)

    def done(label, seed):
        return json.loads((out / "runs" / label / f"seed{seed}" / "done.json").read_text())

    for seed in (0, 1):
        assert done("no_update_control", seed)["summary"]["parameter_sha256"] == initial
        aa, base = done("aa_control", seed), done("baseline", seed)
        assert aa["evals"][0] == base["evals"][0]  # same policy, same problems
        assert (
            json.loads((out / "runs" / "aa_control" / f"seed{seed}" / "config.json").read_text())[
                "sampling_stream"
            ]
            == 1
        )
    # the baseline did move: the no-update arm is a real harm, not what every arm does here
    assert any(done("baseline", s)["summary"]["parameter_sha256"] != initial for s in (0, 1))
    report = (out / "report.md").read_text()
    assert "pairing check passed" in report
    start = report.index("## Sensitivity of this instrument")
    section = report[start : report.index("\n## ", start + 1)]
    # 2 seeds: no verdict is possible, and the report says the controls were not tested
    assert "control aa_control (must be no detectable difference)" in section
    assert "control no_update_control (must be worse)" in section
    assert section.count("— untested (2 seeds: no verdict possible; needs 6)") == 2
    assert "control `no_update_control` (no_update, must be worse)" in report  # setup line
    assert json.loads((out / "experiment.json").read_text())["controls"] == {
        "aa_control": "same",
        "no_update_control": "worse",
    }
    printed = capsys.readouterr().out
    assert "6 runs: 6 finished" in printed
    assert "no_update_control" in printed
    assert "[control, must be worse: untested (2 seeds: no verdict possible; needs 6)]" in printed
