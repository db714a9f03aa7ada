"""Rendering reads, analysis computes: report.md, report.html, statistics.csv, the plots and
the terminal summary are written from a stored `Analysis` with every function of harness/statistics made to
raise, and they print the stored numbers (set by hand here to values no computation gives)."""

import inspect

import pytest

from dataflex_rl.harness.reporting import (
    document,
    html_report,
    narrative,
    plots,
    report,
    strata,
)
from dataflex_rl.harness.reporting.report import ReportInputs, render_report, report_document
from dataflex_rl.harness.statistics import (
    aggregates,
    analysis,
    curves,
    power,
    results,
    sequential,
    stats,
)
from dataflex_rl.harness.statistics.analysis import StatsOptions, analyze
from dataflex_rl.harness.statistics.power import SeedAdvice
from dataflex_rl.harness.statistics.results import Row

STATISTICS = (aggregates, analysis, curves, power, results, sequential, stats)
RENDERING = (document, html_report, narrative, plots, report, strata)


def stored_analysis():
    """8 seeds, 2 benchmarks with checkpoints, a mixer's proportions, an A/A control."""
    rows = []
    for s in range(8):
        for bench, base in (("x", 0.3), ("y", 0.6)):
            b = base + 0.01 * s
            for m, gain in (("baseline", 0.0), ("up", 0.05 + 0.001 * (s % 2)), ("aa", 0.0)):
                # the compared score is the sampled accuracy; greedy is the other one
                rows += [
                    Row(m, str(s), bench, base, step=0, extra={"sampled": base, "greedy": base}),
                    Row(
                        m,
                        str(s),
                        bench,
                        b + gain,
                        step=10,
                        extra={"sampled": b + gain, "greedy": b},
                    ),
                ]
    props = [
        {"method": "up", "seed": "0", "step": k, "domain": d, "target": 0.5, "actual": 0.5}
        for k in range(3)
        for d in ("x", "y")
    ]
    a = analyze(
        rows,
        "baseline",
        StatsOptions(n_boot=200),
        controls={"aa": "same"},
        proportions=props,
        seeds_needed=True,
    )
    return a, rows


def make_everything_raise(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("rendering computed a statistic")

    for mod in STATISTICS:  # module.function calls
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                monkeypatch.setattr(mod, name, forbidden)
    for mod in RENDERING:  # names imported from harness/statistics
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__.startswith("dataflex_rl.harness.stat"):
                monkeypatch.setattr(mod, name, forbidden)


def test_rendering_a_stored_analysis_computes_nothing(tmp_path, monkeypatch):
    a, rows = stored_analysis()
    # stored by hand: numbers no computation on these rows gives
    a.primary.mde, a.primary.pooled_sd = 0.0321, 0.0456
    a.advice = SeedAdvice(8, 1, 0.0078, 6, 6, effect=0.01, seeds_needed=17)
    make_everything_raise(monkeypatch)
    with pytest.raises(AssertionError, match="computed a statistic"):
        power.simulated_mde(0.01, 8)  # the guard is on

    parts = render_report(a, tmp_path, ReportInputs("t", "baseline", setup=["one line"]))
    text = (tmp_path / "report.md").read_text()
    # 0.0321 and 0.0456 in points, one decimal: 3.2 and 4.6 (the headline and the
    # sensitivity section read the same stored numbers)
    assert "the minimum detectable effect at 8 paired seeds is 3.2 points" in text
    assert "pooled SD of paired differences 4.6 points" in text
    assert "Holm over 1: 3.2 points" in text
    assert "would take about 17 paired seeds" in text
    assert "control aa (must be no detectable difference)" in text
    for f in ("forest", "learning_curves", "profiles", "proportions"):
        assert (tmp_path / "plots" / f"{f}.png").stat().st_size > 0, f
    assert "| up | 8 × 2 |" in text  # the stored aggregates
    page = (tmp_path / "report.html").read_text()
    assert "3.2 points" in page and "about 17 paired seeds" in page
    summary = document.text(report_document(parts), only=("scores",))
    assert "3.2 points" in summary and "greedy accuracy" in summary


def test_the_stored_numbers_are_the_computed_ones():
    # without the overrides, what the renderer prints is what analyze computed
    a, _ = stored_analysis()
    s = a.primary
    assert s.pooled_sd == pytest.approx(analysis.pooled_sd(s.comparisons))
    assert s.mde == pytest.approx(power.simulated_mde(s.pooled_sd, 8, m=1))
    assert a.advice.effect == 0.01 and a.advice.n == 8
