"""``report --from-csv`` on a table in a paper's release layout (tests/release_table.py): one
command gives one comparison per model × campaign × regime, each equal to reshaping that
stratum by hand and running the long-format path on it (the oracle)."""

import csv

import pytest

from tests.harness_cli import run_cli
from tests.release_table import (
    BENCHMARKS,
    CAMPAIGNS,
    MODELS,
    REGIMES,
    long_rows,
    release_records,
    seeds_of,
    write_domains_yaml,
    write_release_csv,
)

BY = ("model", "campaign", "regime")
FAST = ["--no-plots", "--n-boot", "300", "--baseline", "grpo"]


def read(path):
    return list(csv.DictReader(path.open()))


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wide")
    records = release_records()
    wide = write_release_csv(tmp / "release.csv", records)
    domains = write_domains_yaml(tmp / "domains.yaml")
    argv = ["report", "--from-csv", str(wide), "--by", ",".join(BY), "--scale", "0.01"]
    assert run_cli([*argv, "--domains", str(domains), "--out", str(tmp / "out"), *FAST]) == 0
    return tmp, records


def test_one_comparison_per_stratum_equal_to_the_long_path(reported):
    tmp, records = reported
    out = tmp / "out"
    combined = read(out / "statistics.csv")
    strata = [(m, c, r) for c in CAMPAIGNS for m in MODELS for r in REGIMES]
    assert {tuple(row[k] for k in BY) for row in combined} == set(strata)
    for model, campaign, regime in strata:
        # the oracle: this stratum reshaped by hand, through the long-format path
        long_csv = tmp / f"{model}-{campaign}-{regime}.csv"
        with long_csv.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["method", "seed", "benchmark", "domain", "score"])
            w.writerows(long_rows(records, model, campaign, regime))
        oracle_dir = tmp / f"oracle-{model}-{campaign}-{regime}"
        argv = ["report", "--from-csv", str(long_csv), "--scale", "0.01", "--out", str(oracle_dir)]
        assert run_cli([*argv, *FAST]) == 0
        want = {(r["summary"], r["method"]): r for r in read(oracle_dir / "statistics.csv")}
        folder = out / f"{model}_{campaign}_{regime}"
        got = {(r["summary"], r["method"]): r for r in read(folder / "statistics.csv")}
        assert got == want, (model, campaign, regime)
        block = {
            (r["summary"], r["method"]): {k: v for k, v in r.items() if k not in BY}
            for r in combined
            if (r["model"], r["campaign"], r["regime"]) == (model, campaign, regime)
        }
        assert block == want
        # 6 benchmarks, 2 domains, the average; 3 methods each
        assert {s for s, _ in want} == {*BENCHMARKS, "math", "science", "average"}
        n = seeds_of(campaign, model, regime)
        assert {r["n"] for r in want.values()} == {str(n)}


def test_verdicts_where_the_seeds_allow_them_and_why_not_where_they_do_not(reported):
    tmp, _ = reported
    combined = read(tmp / "out" / "statistics.csv")
    avg = {
        (r["model"], r["campaign"], r["regime"], r["method"]): r
        for r in combined
        if r["summary"] == "average"
    }
    for model in MODELS:
        for regime in REGIMES:
            # c1: 3 paired seeds: the exact test's floor 2/8 = 0.25 > 0.05, no verdict, no interval
            c1 = avg[(model, "c1", regime, "difffilter")]
            assert c1["verdict_possible"] == "False" and c1["corrected_ci_low"] == ""
            assert float(c1["p_holm_floor"]) == pytest.approx(2 * 0.25)  # Holm over 2, m·f
            # c2: difffilter +3 points; 8 seeds decide (2 · 2/256 = 0.016), 6 do not (0.0625)
            c2 = avg[(model, "c2", regime, "difffilter")]
            assert float(c2["delta"]) == pytest.approx(0.03, abs=0.003)
            decided = seeds_of("c2", model, regime) == 8
            assert c2["verdict"] == ("better" if decided else "no detectable difference")
            assert c2["verdict_possible"] == str(decided)
    text = (tmp / "out" / "report.md").read_text()
    # the index: one line per stratum, then one section each
    assert text.count("\n## model=") == 8
    assert (
        "| qwen2.5-math-7b | c1 | short | grpo | 2 | 3 | no (3 paired seeds) | 0 | 0 | 2 | "
        "[qwen2.5-math-7b_c1_short/report.md](qwen2.5-math-7b_c1_short/report.md) |"
    ) in text
    section = text.split("## model=qwen2.5-math-7b, campaign=c1, regime=short")[1].split("\n## ")[0]
    # (methods in the file's first-seen order)
    assert "No verdict is possible for d" in section
    assert (
        "on 'average': with 3 paired seeds the exact sign-flip test, Holm over 2, cannot give "
        "an adjusted p below 0.5 > α = 0.05, whatever the scores"
    ) in section
    assert "With 3 seeds the exact sign-flip test cannot give p below 0.25" in section
    assert text.count("## Definitions") == 1
    own = (tmp / "out" / "qwen2.5-math-7b_c1_short" / "report.md").read_text()
    assert own.startswith("# Comparison: release.csv — model=qwen2.5-math-7b, campaign=c1")


@pytest.mark.parametrize(
    "extra, expected",
    [
        # without --by, the models' runs collide: named, with the columns that differ
        ([], "lines 2 and "),
        (["--by", "model,campaign,regime", "--baseline", "ppo"], "--baseline 'ppo': not a method"),
        (["--by", "model,campagin"], "--by campagin: not a column of"),
        (["--by", "model,,regime"], "argument --by: 'model,,regime': expected distinct column"),
        (["--scale", "-1"], "argument --scale"),
        (["--domains", "no/such.yaml", "--by", "model"], "--domains no/such.yaml: no such file"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, extra, expected):
    from dataflex_rl.cli import main

    wide = write_release_csv(tmp_path / "release.csv")
    try:
        code = main(["report", "--from-csv", str(wide), "--no-plots", *extra])
    except SystemExit as e:  # argparse's own refusals (usage line, then the error)
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert not (tmp_path / "release_report").exists()  # refused before writing anything


def test_a_stratum_without_the_baseline_is_named_and_the_others_reported(tmp_path, capsys):
    records = [
        r for r in release_records() if not (r["model"], r["method"]) == ("llama-3.1-8b", "grpo")
    ]
    wide = write_release_csv(tmp_path / "release.csv", records)
    out = tmp_path / "out"
    argv = ["report", "--from-csv", str(wide), "--by", ",".join(BY), "--baseline", "grpo"]
    assert run_cli([*argv, "--out", str(out), *FAST[:3]]) == 0
    text = (out / "report.md").read_text()
    assert text.startswith("# Comparison: release.csv\n\n4 of 8 strata compared")
    # the four llama strata: in the index, not compared, with the reason
    for campaign in CAMPAIGNS:
        for regime in REGIMES:
            label = f"model=llama-3.1-8b, campaign={campaign}, regime={regime}"
            assert (
                f"- note: {label}: not compared, no reference (grpo) among its methods: "
            ) in text
            assert not (out / f"llama-3.1-8b_{campaign}_{regime}").exists()
    assert text.count("not compared (see the notes)") == 4
    assert {r["model"] for r in read(out / "statistics.csv")} == {"qwen2.5-math-7b"}
