"""The quickstart comparison path: two strategies in two processes, one table."""

from __future__ import annotations

from pathlib import Path

from dataflex_rl.engine.compare import compare_strategies, format_table
from dataflex_rl.engine.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_yaml_compares_two_strategies_in_two_processes(tmp_path):
    cfg = load_config(ROOT / "examples" / "quickstart.yaml")
    assert len(cfg.strategies) == 2 and cfg.strategies[0] == "baseline"
    cfg.grpo.prompts_per_step, cfg.grpo.group_size = 4, 4
    cfg.tasks.train_size = 30
    cfg.eval.per_domain, cfg.eval.samples = 6, 1
    cfg.log.plots = False
    summaries = compare_strategies(cfg, cfg.strategies, steps=2, out_root=tmp_path, workers=2,
                                   progress=False)
    assert [s["strategy"] for s in summaries] == cfg.strategies
    assert all(s["steps"] == 2 for s in summaries)
    table = format_table(summaries)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["strategy", "logic", "math", "science"]
    assert lines[2].startswith("baseline") and lines[3].startswith(cfg.strategies[1])
    for s in cfg.strategies:
        assert (tmp_path / s / "metrics.jsonl").is_file()
