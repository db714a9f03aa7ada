"""Engine plots: the domains figure finds the mixer's per-domain keys through the metric-name
helpers of core.metrics (one naming rule), whatever the domain is called."""

from __future__ import annotations

import json

import pytest

from dataflex_rl.core.metrics import domain_metric
from dataflex_rl.hosts.engine import plots
from dataflex_rl.hosts.engine.runlog import METRICS_FILE


def test_domains_plot_draws_target_and_actual_of_every_domain(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    domains = ["math", "openai/gsm8k"]
    rows = []
    for step in range(3):
        row = {"kind": "train", "step": step}
        for i, d in enumerate(domains):
            row[domain_metric("mix", d, "target")] = 0.25 + 0.5 * i
            row[domain_metric("mix", d, "actual")] = 0.2 + 0.5 * i + 0.01 * step
        rows.append(row)
    rows.append({"kind": "eval", "step": 2, "eval/math/greedy": 0.5})
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    saved = {}

    def keep(fig, path):
        saved[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.plot_run(tmp_path)
    lines = saved["domains.png"].axes[0].get_lines()
    got = {ln.get_label(): list(ln.get_ydata()) for ln in lines}
    assert set(got) == {
        "math target",
        "math actual",
        "openai_gsm8k target",
        "openai_gsm8k actual",
    }
    assert got["openai_gsm8k actual"] == pytest.approx([0.7, 0.71, 0.72])
    assert got["math target"] == pytest.approx([0.25] * 3)
