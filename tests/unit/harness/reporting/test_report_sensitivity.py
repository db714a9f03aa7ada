"""report.md: the sensitivity section (before any verdict table), controls, pairing
correlation, paired-seed counts, aggregates; statistics.csv columns."""

import csv
import math

import numpy as np
import pytest

from dataflex_rl.harness.reporting.document import text as terminal_text
from dataflex_rl.harness.reporting.report import (
    ReportInputs,
    prepare_report,
    report_document,
    write_report,
    write_report_files,
)
from dataflex_rl.harness.statistics import power
from dataflex_rl.harness.statistics.analysis import pooled_sd
from dataflex_rl.harness.statistics.results import Row


def matrix_rows(n_seeds=8, missing_up=()):
    rng = np.random.default_rng(0)
    rows = []
    for s in range(n_seeds):
        for bench in ("math", "logic"):
            b = 0.5 + 0.03 * rng.standard_normal()
            arms = {
                "baseline": b,
                "up": b + 0.05 + 0.01 * rng.standard_normal(),
                "flat": b + 0.01 * rng.standard_normal(),
                "aa": b + 0.01 * rng.standard_normal(),
                "harm": b - 0.08 + 0.01 * rng.standard_normal(),
            }
            for m, v in arms.items():
                if m == "up" and s in missing_up:
                    continue
                rows.append(Row(m, str(s), bench, float(v), bench, 100))
    return rows


def section_of(md: str, start: str) -> str:
    """The markdown from ``start`` (a heading) to the next level-2 heading."""
    i = md.index(start)
    j = md.find("\n## ", i + 1)
    return md[i:] if j < 0 else md[i:j]


def test_sensitivity_section_comes_before_the_verdicts(tmp_path):
    a = write_report(
        matrix_rows(),
        tmp_path,
        ReportInputs("t", "baseline", plots=False, controls={"aa": "same", "harm": "worse"}),
    )
    text = (tmp_path / "report.md").read_text()
    sens = text.index("## Sensitivity of this instrument")
    assert sens < text.index("## Verdicts") < text.index("## Ranking")
    section = section_of(text, "## Sensitivity of this instrument")
    assert "control aa (must be no detectable difference): no detectable difference" in section
    assert "control harm (must be worse): worse" in section
    assert section.count("**passed**") == 2
    assert "pairing correlation" in section and "up +" in section
    # the MDE stated is the simulated one at 8 pairs among the 2 real comparisons
    mde = power.simulated_mde(pooled_sd(a.primary.comparisons), 8, m=2)
    assert f"Holm over 2: {100 * mde:.1f} points" in section
    # controls stay out of the ranking
    ranking = text[text.index("## Ranking") : text.index("Kendall's tau-b between")]
    assert "| aa |" not in ranking and "| harm |" not in ranking
    assert "## Aggregates over runs × benchmarks" in text and "| up | 8 × 2 |" in text


def test_statistics_csv_has_correlation_and_controls(tmp_path):
    write_report(
        matrix_rows(), tmp_path, ReportInputs("t", "baseline", plots=False, controls={"aa": "same"})
    )
    rows = list(csv.DictReader((tmp_path / "statistics.csv").open()))
    avg = {r["method"]: r for r in rows if r["summary"] == "average"}
    assert set(avg) == {"baseline", "up", "flat", "aa", "harm"}
    assert avg["aa"]["control"] == "same" and avg["aa"]["control_passed"] == "True"
    assert avg["up"]["control"] == "" and -1 <= float(avg["up"]["corr"]) <= 1
    assert math.isfinite(float(avg["up"]["mde"]))


def test_headline_counts_pairs_not_seed_labels(tmp_path):
    # 'up' lacks seeds 0 and 1: 6 pairs; the others have 8 -> "6–8 paired seed(s)"
    write_report(
        matrix_rows(missing_up=(0, 1)), tmp_path, ReportInputs("t", "baseline", plots=False)
    )
    text = (tmp_path / "report.md").read_text()
    assert "with 6–8 paired seed(s)" in text
    assert "minimum detectable effect at 6 paired seeds" in text


def test_no_controls_is_said(tmp_path):
    write_report(matrix_rows(), tmp_path, ReportInputs("t", "baseline", plots=False))
    assert "no control arms" in (tmp_path / "report.md").read_text()


def test_profiles_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    write_report(matrix_rows(), tmp_path, ReportInputs("t", "baseline"))
    assert (tmp_path / "plots" / "profiles.png").is_file()


def test_controls_at_three_seeds_are_untested_everywhere(tmp_path):
    # 3 seeds: 2/2^3 = 0.25 > 0.05, no verdict possible; a control (a family of one) needs 6
    # (2/2^6 = 0.031 <= 0.05 < 2/2^5); the harm, 8 points below, would otherwise "fail"
    rows = matrix_rows(n_seeds=3)
    inputs = ReportInputs("t", "baseline", plots=False, controls={"aa": "same", "harm": "worse"})
    parts = prepare_report(rows, tmp_path, inputs)
    write_report_files(parts)
    want = "untested (3 seeds: no verdict possible; needs 6)"
    md = (tmp_path / "report.md").read_text()
    section = section_of(md, "## Sensitivity")
    assert "control aa (must be no detectable difference): no detectable difference" in section
    assert section.count(f"(tested on its own) — {want}") == 2
    assert "passed" not in section and "FAILED" not in section
    table = md[md.index("## Verdicts") :].split("\n\n")[1]
    assert f"| no detectable difference; control (worse): {want} |" in table
    html = (tmp_path / "report.html").read_text()
    # the sensitivity lines, the control rows of the tables of average, math and logic, and
    # of the scores table (the terminal's)
    assert md.count(want) == html.count(want) == 2 + 3 * 2 + 2
    rows_csv = list(csv.DictReader((tmp_path / "statistics.csv").open()))
    avg = {r["method"]: r for r in rows_csv if r["summary"] == "average"}
    assert (avg["aa"]["control_status"], avg["harm"]["control_status"]) == (want, want)
    assert avg["aa"]["control_passed"] == avg["harm"]["control_passed"] == ""
    assert avg["up"]["control_status"] == ""
    text = terminal_text(report_document(parts), only=("scores",))
    assert f"[control, must be same: {want}]" in text
    assert f"[control, must be worse: {want}]" in text
