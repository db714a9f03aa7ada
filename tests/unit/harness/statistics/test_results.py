"""harness/statistics/results.py: results.csv round trip and clear errors for external CSVs."""

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics.results import Row, final_scores, write_results_csv
from dataflex_rl.harness.statistics.results_table import read_results_csv


def test_round_trip(tmp_path):
    rows = [
        Row("baseline", "0", "math", 0.25, "math", 0, {"greedy": 0.25}),
        Row("per", "1", "logic", 1 / 3, "logic", 100, {"greedy": 1 / 3, "sampled": 0.3}),
    ]
    path = write_results_csv(rows, tmp_path / "results.csv")
    assert (
        path.read_text().splitlines()[0] == "method,seed,benchmark,domain,step,score,greedy,sampled"
    )
    back = read_results_csv(path)
    assert back == rows  # exact floats (repr) round-trip
    assert back[1].extra == {"greedy": 1 / 3, "sampled": 0.3}


def test_external_minimal_columns(tmp_path):
    p = tmp_path / "ext.csv"
    p.write_text("method,seed,benchmark,score,notes\ngrpo,a,aime24,0.3,x\ngrpo,b,aime24,40\n")
    rows = read_results_csv(p)
    assert [(r.method, r.seed, r.benchmark, r.score, r.step, r.domain) for r in rows] == [
        ("grpo", "a", "aime24", 0.3, None, ""),
        ("grpo", "b", "aime24", 40.0, None, ""),
    ]


@pytest.mark.parametrize(
    "text, match",
    [
        ("method,seed,score\nm,0,1\n", r"missing column\(s\) benchmark"),
        ("method,seed,benchmark,score\nm,0,b,abc\n", r":2: score 'abc' is not a number"),
        ("method,seed,benchmark,score\nm,0,b,nan\n", r":2: score is 'nan'"),
        ("method,seed,benchmark,score\n,0,b,1\n", r":2: empty 'method'"),
        ("method,seed,benchmark,score,step\nm,0,b,1,x\n", r"step 'x' is not an integer"),
        ("method,seed,benchmark,score\n", r"no result rows"),
    ],
)
def test_errors_name_line_and_column(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_results_csv(p)


def test_missing_file():
    with pytest.raises(ConfigError, match="no such file"):
        read_results_csv("/nonexistent/x.csv")


def test_duplicates_are_an_error():
    rows = [Row("m", "0", "b", 0.1), Row("m", "0", "b", 0.2)]
    with pytest.raises(ConfigError, match="duplicate result: method=m seed=0 benchmark=b"):
        final_scores(rows)
