"""harness/reporting/report.py and ``dataflex-rl report --from-csv``: files, tables, sentences."""

import csv

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting.report import Failure, ReportInputs, write_report
from dataflex_rl.harness.statistics.results import Row
from tests.harness_cli import run_cli


def constant_gain_rows(n_seeds, gain=0.05):
    rows = []
    for s in range(n_seeds):
        for bench, base in (("math", 0.4), ("logic", 0.6)):
            b = base + 0.01 * s
            rows += [
                Row("baseline", str(s), bench, b, bench, 100),
                Row("up", str(s), bench, b + gain, bench, 100),
                Row("baseline", str(s), bench, base, bench, 0),
                Row("up", str(s), bench, base, bench, 0),
            ]
    return rows


def test_eight_seeds_constant_gain_is_better(tmp_path):
    a = write_report(constant_gain_rows(8), tmp_path, ReportInputs("t", "baseline"))
    text = (tmp_path / "report.md").read_text()
    # every seed +5 points: interval [+5.0, +5.0]; exact p = 2/2^8 = 0.0078; one method, no
    # Holm inflation
    assert (
        "**up** is better than baseline on 'average': +5.0 points (corrected 95.0% "
        "interval [+5.0, +5.0], Holm p = 0.008)."
    ) in text
    assert "**1 better, 0 worse, 0 no detectable difference**" in text
    assert a.primary.comparisons[0].verdict == "better"
    for f in ("report.md", "statistics.csv", "plots/forest.png", "plots/learning_curves.png"):
        assert (tmp_path / f).is_file(), f
    stats_rows = list(csv.DictReader((tmp_path / "statistics.csv").open()))
    assert {r["summary"] for r in stats_rows} == {"math", "logic", "average"}
    up = next(r for r in stats_rows if r["summary"] == "average" and r["method"] == "up")
    assert float(up["delta"]) == pytest.approx(0.05) and up["verdict"] == "better"


def test_three_seeds_say_no_verdict_is_possible(tmp_path):
    write_report(constant_gain_rows(3), tmp_path, ReportInputs("t", "baseline", plots=False))
    text = (tmp_path / "report.md").read_text()
    assert "**0 better, 0 worse, 1 no detectable difference**" in text
    assert "With 3 seeds the exact sign-flip test cannot give p below 0.25" in text
    # every seed +5 points: a bootstrap over 3 deltas would read [+5.0, +5.0]; no verdict is
    # possible (2/2^3 = 0.25 > 0.05), so no interval is shown, in the table or the CSV
    assert (
        "No verdict is possible for up on 'average': with 3 paired seeds the exact sign-flip "
        "test, Holm over 1, cannot give an adjusted p below 0.25 > α = 0.05"
    ) in text
    assert "| up | 3 | " in text and "+5.0 n/a (3 seeds) | n/a (3 seeds) | 0.250 |" in text
    assert "[+5.0, +5.0]" not in text
    stats_rows = list(csv.DictReader((tmp_path / "statistics.csv").open()))
    up = next(r for r in stats_rows if r["summary"] == "average" and r["method"] == "up")
    assert up["verdict_possible"] == "False" and up["p_holm_floor"] == "0.25"
    for col in ("delta_ci_low", "delta_ci_high", "corrected_ci_low", "corrected_ci_high"):
        assert up[col] == "", col
    assert not (tmp_path / "plots").exists()


def test_six_seeds_show_intervals_and_a_verdict(tmp_path):
    # 6 seeds, one method: the floor 2/2^6 = 0.03125 <= 0.05, so a verdict is possible
    a = write_report(constant_gain_rows(6), tmp_path, ReportInputs("t", "baseline", plots=False))
    c = a.primary.comparisons[0]
    assert c.verdict_possible and c.p_holm_floor == pytest.approx(2 / 64)
    assert c.verdict == "better" and c.corrected_ci == pytest.approx((0.05, 0.05))
    assert "seeds) |" not in (tmp_path / "report.md").read_text()
    assert "| +5.0 [+5.0, +5.0] | [+5.0, +5.0] (95.0%) |" in (tmp_path / "report.md").read_text()


def test_failures_and_proportions_are_reported(tmp_path):
    props = [
        {"method": "up", "seed": "0", "step": s, "domain": d, "target": 0.5, "actual": 0.5}
        for s in range(3)
        for d in ("math", "logic")
    ]
    write_report(
        constant_gain_rows(2),
        tmp_path,
        ReportInputs(
            "t",
            "baseline",
            failures=[Failure("gfpo", "1", "ValueError: boom", "Trace\nValueError")],
            proportions=props,
        ),
    )
    text = (tmp_path / "report.md").read_text()
    assert "**1 run(s) failed**" in text and "- **gfpo**, seed 1: `ValueError: boom`" in text
    assert (tmp_path / "plots" / "proportions.png").is_file()


def test_report_from_csv_cli(tmp_path, capsys):
    p = tmp_path / "campaign.csv"
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seed", "benchmark", "score", "domain"])
        for s in range(6):
            for bench, dom in (("aime24", "math"), ("math500", "math"), ("gpqa", "science")):
                w.writerow(["grpo", s, bench, 30 + s, dom])
                w.writerow(["dapo", s, bench, 32 + s + (s % 2), dom])
    assert (
        run_cli(
            ["report", "--from-csv", str(p), "--baseline", "grpo", "--out", str(tmp_path / "r")]
        )
        == 0
    )
    text = (tmp_path / "r" / "report.md").read_text()
    # benchmarks, then the domains that group several benchmarks, then the average
    assert "### aime24" in text and "### math" in text and "### gpqa" in text
    assert "### science" not in text  # science has one benchmark: same as gpqa
    out = capsys.readouterr().out
    # scores above 1 are shown as they are (no points scaling); delta 2.5 in every summary
    assert "dapo" in out and "+2.500" in out


def test_report_cli_unknown_baseline(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("method,seed,benchmark,score\na,0,b,1\n")
    with pytest.raises(ConfigError, match="--baseline 'x': not a method"):
        run_cli(["report", "--from-csv", str(p), "--baseline", "x"])


def test_help_texts(capsys):
    for cmd in ("compare", "report"):
        with pytest.raises(SystemExit):
            run_cli([cmd, "--help"])
    out = capsys.readouterr().out
    assert "paired by seed" in out and "--from-csv FILE" in out and "--workers N" in out
