"""Every CSV that ``compare``, ``report`` (long, wide with --by) and ``replay`` write is
well-formed: each row has as many fields as the header, and ``csv`` and ``pandas`` read it back
to the same values (pandas takes no column as the index; numbers are read as numbers).

The outputs come from the cheapest producers: ``compare`` on the stand-in engine
(tests/unit/harness/fake_engine.py), ``report`` on a few hand-made rows, ``replay`` on a
synthetic decision log. Every ``*.csv`` under their folders is checked, so a CSV added later is
checked too.
"""

import csv
import math

import pandas as pd
import pytest

from dataflex_rl.harness.running.compare import run_compare
from dataflex_rl.harness.running.experiment import parse_experiment
from tests.decision_logs import write_log
from tests.harness_cli import run_cli
from tests.release_table import release_records, write_release_csv

FAKE = "tests.unit.harness.fake_engine:run_training"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("csvs")
    exp = parse_experiment(
        {
            "name": "t",
            "seeds": 2,
            "strategies": ["baseline", "difffilter", "dump_ucb"],
            "engine": {"tasks": {"domains": ["math", "logic"]}},
            "budget": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
            "evaluation": {"every": 1, "per_domain": 2},
            "statistics": {"n_boot": 200},
        }
    )
    run_compare(exp, tmp / "compare", workers=2, progress=False, plots=False, train_fn=FAKE)
    wide = write_release_csv(
        tmp / "release.csv",
        [r for r in release_records() if r["campaign"] == "c1" and r["model"].startswith("qwen")],
    )
    argv = ["report", "--from-csv", str(wide), "--by", "model,regime", "--out", str(tmp / "wide")]
    assert run_cli([*argv, "--no-plots", "--n-boot", "200"]) == 0
    long = tmp / "compare" / "results.csv"
    argv = ["report", "--from-csv", str(long), "--out", str(tmp / "long"), "--no-plots"]
    assert run_cli([*argv, "--n-boot", "200"]) == 0
    write_log(tmp / "run" / "decisions", "dump_ucb", 4)
    argv = ["replay", str(tmp / "run"), "--strategy", "dump_ucb", "--strategy", "maxvar"]
    assert run_cli([*argv, "--out", str(tmp / "replay"), "--no-plots"]) == 0
    return tmp


def test_every_written_csv_round_trips(outputs):
    files = sorted(outputs.rglob("*.csv"))
    names = {p.relative_to(outputs).as_posix() for p in files}
    # every kind of CSV the three commands write is among them
    for want in (
        "compare/results.csv",
        "compare/proportions.csv",
        "compare/statistics.csv",
        "long/statistics.csv",
        "wide/statistics.csv",
        "wide/qwen2.5-math-7b_short/statistics.csv",
        "replay/replay_steps.csv",
        "replay/replay_pairwise.csv",
    ):
        assert want in names, (want, names)
    for path in files:
        if path.name == "release.csv":
            continue  # the test's own input
        with path.open(newline="") as f:
            header, *rows = list(csv.reader(f))
        assert rows, path
        for i, r in enumerate(rows, start=2):
            assert len(r) == len(header), f"{path}:{i}: {len(r)} fields for {len(header)}"
        df = pd.read_csv(path)
        assert list(df.columns) == header, path
        assert isinstance(df.index, pd.RangeIndex) and len(df) == len(rows), path
        for j, col in enumerate(header):
            cells = [r[j] for r in rows]
            filled = [c for c in cells if c != ""]
            numeric = bool(filled) and all(_number(c) is not None for c in filled)
            if numeric:
                assert pd.api.types.is_numeric_dtype(df[col]), (path, col, df[col].dtype)
            for c, v in zip(cells, df[col]):
                if c == "":
                    assert pd.isna(v), (path, col, v)
                elif numeric:
                    x = float(c)
                    assert (math.isnan(x) and math.isnan(v)) or float(v) == x, (path, col, c, v)
                else:
                    assert str(v) == c, (path, col, c, v)


def test_statistics_csv_reads_the_baseline_rows_right(outputs):
    # the bug this guards: baseline rows one field longer than the header made pandas take
    # the first column as the index and shift every column (verdict read NaN / "baseline")
    df = pd.read_csv(outputs / "compare" / "statistics.csv")
    base = df[df["method"] == "baseline"]
    assert len(base) == 3 and set(base["verdict"]) == {"baseline"}  # math, logic, average
    assert base["delta"].isna().all() and base["n"].tolist() == [2, 2, 2]
    other = df[df["method"] == "difffilter"]
    # 2 paired seeds: no verdict possible, no interval; the floor 2 · 2/2^2 = 1 (Holm over 2)
    assert not other["verdict_possible"].any() and other["corrected_ci_low"].isna().all()
    assert other["p_holm_floor"].tolist() == [1.0, 1.0, 1.0]
    wide = pd.read_csv(outputs / "wide" / "statistics.csv")
    assert list(wide.columns[:3]) == ["model", "regime", "summary"]
    assert len(wide.groupby(["model", "regime"])) == 2
