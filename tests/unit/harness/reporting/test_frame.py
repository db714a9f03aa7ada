"""The comparison as a library (`dataflex_rl.analyze`, harness/reporting/frame.py): the same
analysis, checks, errors and files as ``dataflex-rl report``, as DataFrames, HTML for Jupyter
and a gate; importing it does not import torch."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

import dataflex_rl
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics import tracked
from tests.harness_cli import run_cli
from tests.release_table import BENCHMARKS, release_records, write_domains_yaml, write_release_csv
from tests.unit.harness.statistics.test_tracked import run

FAST = {"n_boot": 500}


def test_importing_and_naming_analyze_does_not_import_torch():
    code = (
        "import sys, dataflex_rl; dataflex_rl.analyze; dataflex_rl.tracker_frame; "
        "dataflex_rl.Report; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _without_provenance(text: str) -> list[str]:
    """report.md's lines but the setup's source line and the provenance section."""
    lines = text.split("## How this report was produced")[0].splitlines()
    return [x for x in lines if not x.startswith(("- results:", "# "))]


def test_save_writes_what_report_writes_for_a_wide_table_by_strata(tmp_path):
    records = [r for r in release_records() if r["campaign"] == "c2"]
    csv_path = write_release_csv(tmp_path / "release.csv", records)
    domains = write_domains_yaml(tmp_path / "domains.yaml")
    argv = ["report", "--from-csv", str(csv_path), "--by", "model,campaign,regime"]
    argv += ["--scale", "0.01", "--domains", str(domains), "--baseline", "grpo"]
    argv += ["--n-boot", "500", "--no-plots", "--margin", "0.01", "--out", str(tmp_path / "cli")]
    assert run_cli(argv) == 0
    frame = pd.read_csv(csv_path)
    r = dataflex_rl.analyze(
        frame,
        by=["model", "campaign", "regime"],
        scale=0.01,
        domains=BENCHMARKS,
        baseline="grpo",
        margin=0.01,
        statistics=FAST,
    )
    r.save(tmp_path / "api")
    cli, api = tmp_path / "cli", tmp_path / "api"
    assert (api / "statistics.csv").read_bytes() == (cli / "statistics.csv").read_bytes()
    folders = sorted(p.parent.name for p in cli.glob("*/report.md"))
    assert folders == sorted(p.parent.name for p in api.glob("*/report.md")) and len(folders) == 4
    for f in folders:
        assert (api / f / "statistics.csv").read_bytes() == (
            cli / f / "statistics.csv"
        ).read_bytes()
    # the index, in markdown and in a notebook, links the folders save wrote
    assert "| model | campaign | regime | reference |" in r.to_markdown()
    assert 'href="qwen2.5-math-7b_c2_short/report.html"' in r._repr_html_()
    # the statistics DataFrame is what pandas reads from the file
    pd.testing.assert_frame_equal(r.statistics, pd.read_csv(cli / "statistics.csv"))
    # verdicts: one row per method and stratum on the average; difffilter (+3 points) better
    # where 8 seeds allow a verdict, not at 6 (llama-3.1-8b, long: Holm floor 2 · 2/64 > 0.05)
    v = r.verdicts
    assert len(v) == 4 * 2 and list(v.columns[:4]) == ["model", "campaign", "regime", "method"]
    ours = v[v.method == "difffilter"].set_index(["model", "regime"])
    assert set(ours.baseline) == {"grpo"}
    assert ours.verdict.to_dict() == {
        ("qwen2.5-math-7b", "short"): "better",
        ("qwen2.5-math-7b", "long"): "better",
        ("llama-3.1-8b", "short"): "better",
        ("llama-3.1-8b", "long"): "no detectable difference",
    }


def test_save_and_renderers_of_one_comparison(tmp_path):
    records = [
        r for r in release_records() if (r["model"], r["campaign"]) == ("llama-3.1-8b", "c2")
    ]
    records = [r for r in records if r["regime"] == "short"]
    csv_path = write_release_csv(tmp_path / "one.csv", records)
    argv = ["report", "--from-csv", str(csv_path), "--scale", "0.01", "--baseline", "grpo"]
    argv += ["--n-boot", "500", "--margin", "0.02", "--out", str(tmp_path / "cli")]
    assert run_cli(argv) == 0
    frame = pd.read_csv(csv_path).rename(columns={"method": "algo"})
    r = dataflex_rl.analyze(
        frame, method="algo", scale=0.01, baseline="grpo", margin=0.02, statistics=FAST
    )
    r.save(tmp_path / "api")
    cli, api = tmp_path / "cli", tmp_path / "api"
    assert (api / "statistics.csv").read_bytes() == (cli / "statistics.csv").read_bytes()
    md = (api / "report.md").read_text()
    assert _without_provenance(md) == _without_provenance((cli / "report.md").read_text())
    assert sorted(p.name for p in (api / "plots").iterdir()) == sorted(
        p.name for p in (cli / "plots").iterdir()
    )
    assert _without_provenance(r.to_markdown())[:3] == _without_provenance(md)[:3]
    # per-metric tables, one of the DataFrame's rows checked against the stored analysis
    c = next(c for c in r.analysis.summary("math500").comparisons if c.method == "difffilter")
    row = r.summary("math500").set_index("method").loc["difffilter"]
    assert (
        row.delta == c.delta and row.p_holm == c.p_holm and row.margin_verdict == c.margin_verdict
    )
    # Jupyter: the page's body, plots inlined, its style confined to the report's element
    h = r._repr_html_()
    assert h.count("data:image/png;base64,") == len(list((cli / "plots").iterdir()))
    assert "at ±2.0 points" in h and "\nbody {" not in h and ".dataflex-report table {" in h
    assert r.to_html().startswith("<!DOCTYPE html>")


def _long(deltas: dict[str, list[float]]) -> pd.DataFrame:
    """A long frame: baseline 0.5 on seed s, each method 0.5 + its delta on seed s."""
    rows = [("main", s, "bench", 0.5) for s in range(len(next(iter(deltas.values()))))]
    rows += [(m, s, "bench", 0.5 + d) for m, ds in deltas.items() for s, d in enumerate(ds)]
    return pd.DataFrame(rows, columns=["method", "seed", "benchmark", "score"])


def test_gate_on_hand_worked_differences():
    # cheap: |d| < 0.005 on all 6 seeds, both one-sided p = 1/64, Holm over 2: 2/64 <= 0.05,
    # equivalent (passes non-inferior); broken: d + 0.005 < 0 on every seed: inferior
    cheap = [0.002, -0.001, 0.003, 0.0, 0.001, 0.002]
    broken = [-0.02, -0.03, -0.04, -0.05, -0.06, -0.03]
    r = dataflex_rl.analyze(
        _long({"cheap": cheap, "broken": broken}), margin=0.005, statistics=FAST
    )
    assert r.analysis.baseline == "main"
    g = r.gate("non-inferior")
    assert [(c.method, c.outcome, c.verdict, c.p_holm) for c in g.checks] == [
        ("cheap", "pass", "equivalent", 2 / 64),
        ("broken", "fail", "inferior", 2 / 64),
    ]
    assert (g.outcome, g.exit_code) == ("fail", 1)
    assert r.gate("non-inferior", methods=["cheap"]).exit_code == 0
    # three seeds: the one-sided floor 1/8 > 0.05, undecided, with the seeds it needs
    g = dataflex_rl.analyze(_long({"cheap": cheap[:3]}), margin=0.005).gate("non-inferior")
    (c,) = g.checks
    assert (g.exit_code, c.outcome, c.n_pairs) == (3, "inconclusive", 3) and c.seeds_needed >= 5
    assert "paired seeds needed" in g.summary_line()


def test_errors_are_the_reports_one_liners():
    frame = _long({"cheap": [0.1, 0.2]})
    with pytest.raises(ConfigError, match=r"method='algo': not a column of the DataFrame"):
        dataflex_rl.analyze(frame, method="algo")
    with pytest.raises(ConfigError, match=r"DataFrame:1: seed '1.5' is not an integer"):
        dataflex_rl.analyze(frame.assign(seed=[0, 1.5, 0, 1]))
    with pytest.raises(ConfigError, match=r"metrics: .bnch. is not a benchmark.*Did you mean"):
        dataflex_rl.analyze(frame, metrics=["bnch"])
    with pytest.raises(ConfigError, match=r"DataFrame: duplicate result method=main, seed=0"):
        dataflex_rl.analyze(pd.concat([frame, frame.iloc[:1]]))
    with pytest.raises(ConfigError, match=r"baseline 'nope'"):
        dataflex_rl.analyze(frame, baseline="nope")
    with pytest.raises(ConfigError, match=r"statistics\.alpah"):
        dataflex_rl.analyze(frame, statistics={"alpah": 0.1})
    with pytest.raises(ConfigError, match="--require non-inferior needs --margin"):
        dataflex_rl.analyze(frame).gate("non-inferior")


def test_tracker_frame_gives_what_report_from_tracker_gives(monkeypatch, tmp_path):
    runs = [
        run(
            f"{m}-{s}",
            method=m,
            seed=str(s),
            model=model,
            metrics={
                "eval/math/greedy": {0: 0.2, 10: 0.4 + gain + 0.01 * s},
                "eval/logic/greedy": {10: 0.3 + gain - 0.01 * s},
            },
        )
        for model in ("a", "b")
        for m, gain in (("grpo", 0.0), ("dapo", 0.05))
        for s in range(6)
    ]
    monkeypatch.setattr(tracked, "read_runs", lambda backend, location, **kw: list(runs))
    monkeypatch.setattr(tracked, "require_reader", lambda *a: None)
    frame = dataflex_rl.tracker_frame("wandb:somewhere", by=["model"])
    assert list(frame.columns) == ["model", "method", "seed", "benchmark", "step", "score"]
    assert len(frame) == 2 * 2 * 6 * 3 and frame.attrs["dataflex_rl.setup"][0].startswith("results")
    r = dataflex_rl.analyze(frame, by="model", baseline="grpo", statistics=FAST)
    argv = ["report", "--from-tracker", "wandb:somewhere", "--by", "model", "--baseline", "grpo"]
    assert run_cli([*argv, "--n-boot", "500", "--no-plots", "--out", str(tmp_path)]) == 0
    pd.testing.assert_frame_equal(r.statistics, pd.read_csv(tmp_path / "statistics.csv"))
    assert set(r.verdicts.verdict) == {"better"} and not math.isnan(r.verdicts.delta[0])
