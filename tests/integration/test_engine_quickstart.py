"""The quickstart comparison path: two strategies in two processes (the harness runner), one
table, outputs in ``<out>/<strategy>/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataflex_rl.cli.engine import engine_side_by_side
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.run import format_table

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_yaml_compares_two_strategies_in_two_processes(tmp_path):
    cfg = load_config(ROOT / "examples" / "quickstart.yaml")
    assert len(cfg.strategies) == 2 and cfg.strategies[0] == "baseline"
    cfg.grpo.prompts_per_step, cfg.grpo.group_size = 4, 4
    cfg.tasks.train_size = 30
    cfg.eval.per_domain, cfg.eval.samples = 6, 1
    cfg.log.plots = False
    ex = engine_side_by_side(
        cfg, cfg.strategies, steps=2, out_root=tmp_path, workers=2, progress=False
    )
    assert not ex.failed, ex.failed
    summaries = [r["summary"] for r in ex.done]
    assert [s["strategy"] for s in summaries] == cfg.strategies
    assert all(s["steps"] == 2 for s in summaries)
    table = format_table(summaries)
    lines = table.splitlines()
    # the decision metric (sampled) leads, labelled; greedy beside it
    assert lines[0].split()[:4] == ["sampled", "accuracy", "(decision", "metric)"]
    assert lines[1].split()[:4] == ["strategy", "logic", "math", "science"]
    assert lines[3].startswith("baseline") and lines[4].startswith(cfg.strategies[1])
    for s in cfg.strategies:
        assert (tmp_path / s / "metrics.jsonl").is_file()
    # a second run into the same folders is refused before anything starts (nothing deleted)
    with pytest.raises(ConfigError, match="a run already exists here; use --resume"):
        engine_side_by_side(cfg, cfg.strategies, steps=2, out_root=tmp_path, progress=False)
    assert (tmp_path / "baseline" / "checkpoints").is_dir()


def test_side_by_side_checks_strategies_before_starting(tmp_path):
    cfg = load_config(ROOT / "examples" / "quickstart.yaml")
    with pytest.raises(ConfigError, match=r"strategies\[1\]: unknown strategy preset"):
        engine_side_by_side(cfg, ["baseline", "difffiltr"], out_root=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="distinct names"):
        engine_side_by_side(cfg, ["baseline", "baseline"], out_root=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def test_cli_train_runs_the_configs_strategies_side_by_side(tmp_path, capsys):
    from dataflex_rl.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "policy: tiny\nsteps: 1\nstrategies: [baseline, topk]\n"
        "grpo: {prompts_per_step: 4, group_size: 2}\ntasks: {train_size: 30}\n"
        "eval: {per_domain: 4, samples: 0}\nlog: {plots: false}\n"
    )
    out = tmp_path / "out"
    assert main(["train", str(cfg), "--out", str(out), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # eval.samples 0: greedy alone, labelled
    assert lines[0].split() == ["greedy", "accuracy"] and lines[1].split()[0] == "strategy"
    assert lines[3].startswith("baseline") and lines[4].startswith("topk")
    assert f"under {out}/<strategy>/" in lines[5]
    assert main(["train", str(cfg), "--out", str(out), "--no-progress"]) == 2
    assert "a run already exists here" in capsys.readouterr().err
    assert (
        main(["train", str(cfg), "--out", str(out), "--no-progress", "--resume", "--steps", "2"])
        == 0
    )
    assert [s["steps"] for s in map(_summary, (out / "baseline", out / "topk"))] == [2, 2]


def _summary(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "summary.json").read_text())
