"""The scores table ``compare`` and ``report`` print (`narrative.scores_table`, rendered by
`document.text_table`) leads with the metric compared, per domain, and shows the other
accuracy beside it, labelled."""

from dataflex_rl.harness.reporting.document import text_table
from dataflex_rl.harness.reporting.narrative import Fmt, scores_table
from dataflex_rl.harness.statistics.analysis import StatsOptions, analyze, score_metric
from dataflex_rl.harness.statistics.results import Row


def summary_table(a, rows, fmt):
    return text_table(scores_table(a, fmt))


def engine_rows(n_seeds, metric="sampled"):
    """Rows as compare writes them: greedy and sampled in extra, score = ``metric``."""
    rows = []
    for s in range(n_seeds):
        for method, gain in (("baseline", 0.0), ("up", 0.1)):
            for d, (g, smp) in {"math": (0.8, 0.3), "logic": (0.4, 0.1)}.items():
                extra = {"greedy": g + gain / 2, "sampled": smp + gain + 0.01 * s}
                rows.append(Row(method, str(s), d, extra[metric], d, 10, extra))
    return rows


def test_the_compared_metric_leads_and_the_other_is_beside_it():
    rows = engine_rows(3)
    assert score_metric(rows) == ("sampled", "greedy")
    a = analyze(rows, "baseline", StatsOptions(n_boot=200))
    head, names, _, base, up = summary_table(a, rows, Fmt(100.0, "points")).splitlines()
    assert head.split()[:4] == ["sampled", "accuracy", "(compared,", "points)"]
    assert head.split()[4:] == ["greedy", "accuracy,", "points"]
    assert head.index("sampled") < head.index("greedy")
    cols = names.split()
    assert cols[:4] == ["method", "math", "logic", "average"]
    assert cols[-3:] == ["math", "logic", "average"]  # greedy's columns, after the verdict
    # sampled: math 0.3 + 0.01 * mean seed (1) = 31.0 points, logic 11.0, average 21.0;
    # up +10 points; greedy math 80.0 / 85.0, logic 40.0 / 45.0
    assert base.split()[:4] == ["baseline", "31.0", "11.0", "21.0"]
    assert base.split()[-3:] == ["80.0", "40.0", "60.0"]
    assert up.split()[:5] == ["up", "41.0", "21.0", "31.0", "+10.0"]
    # 3 paired seeds: no verdict is possible, so no interval
    assert "n/a (3 seeds)" in up and up.split()[-3:] == ["85.0", "45.0", "65.0"]


def test_external_scores_have_no_other_metric():
    rows = [Row(r.method, r.seed, r.benchmark, r.score, r.domain, r.step) for r in engine_rows(2)]
    assert score_metric(rows) == ("score", None)
    a = analyze(rows, "baseline", StatsOptions(n_boot=200))
    head = summary_table(a, rows, Fmt(100.0, "points")).splitlines()[0]
    assert head.split() == ["score", "(compared,", "points)"]
