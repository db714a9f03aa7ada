"""``report --from-csv`` on a paper-sized release table (`tests.release_table.paper_records`: 171
runs, 12 benchmarks in percent, 3 seeds, 13 strata): empty regime cells form their own stratum,
the mixing campaign is compared against ``static`` (``--baseline baseline,static``), the stratum
with a single method is listed with the reason; each compared stratum equals reshaping it by
hand and running the long path on it (the oracle of the wide-table tests)."""

import csv
import re

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.reporting.strata import references, skip_reason
from dataflex_rl.harness.statistics.results_table import read_table
from tests.harness_cli import run_cli
from tests.release_table import (
    PAPER_BENCHMARKS,
    PAPER_STRATA,
    long_rows,
    paper_records,
    write_domains_yaml,
    write_paper_csv,
)

BY = ("model", "campaign", "regime")
FAST = ["--no-plots", "--n-boot", "300"]


def read(path):
    return list(csv.DictReader(path.open()))


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper")
    records = paper_records()
    wide = write_paper_csv(tmp / "release.csv", records)
    argv = ["report", "--from-csv", str(wide), "--by", ",".join(BY), "--scale", "0.01"]
    domains = write_domains_yaml(tmp / "domains.yaml", PAPER_BENCHMARKS)
    argv += ["--domains", str(domains), "--baseline", "baseline,static"]
    argv += ["--out", str(tmp / "out"), *FAST]
    assert run_cli(argv) == 0
    return tmp, records


def test_the_generated_table_is_paper_sized():
    records = paper_records()
    assert len(records) == 171 and len(PAPER_STRATA) == 13
    assert len(records[0]) == 7 + 12 and len(PAPER_BENCHMARKS) == 12
    assert sum(r["regime"] == "" for r in records) == 3 * (3 * 5 + 3 * 4 + 3 * 5)
    assert {r["method"] for r in records if r["campaign"] == "mixer"} >= {"static"}
    assert "baseline" not in {r["method"] for r in records if r["campaign"] == "mixer"}


@pytest.mark.parametrize(
    "stratum, reference",
    [
        (("qwen2.5-math-7b", "select", ""), "baseline"),  # an empty regime cell
        (("llama-3.1-8b", "mixer", ""), "static"),  # another reference
        (("qwen2.5-math-7b", "reweight", "long"), "baseline"),
    ],
)
def test_a_stratum_equals_its_reshape_by_hand_through_the_long_path(reported, stratum, reference):
    tmp, records = reported
    model, campaign, regime = stratum
    long_csv = tmp / f"{model}-{campaign}-{regime or 'none'}.csv"
    with long_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seed", "benchmark", "domain", "score"])
        w.writerows(long_rows(records, model, campaign, regime, PAPER_BENCHMARKS))
    oracle = tmp / f"oracle-{long_csv.stem}"
    argv = ["report", "--from-csv", str(long_csv), "--scale", "0.01", "--out", str(oracle)]
    assert run_cli([*argv, "--baseline", reference, *FAST]) == 0
    want = {(r["summary"], r["method"]): r for r in read(oracle / "statistics.csv")}
    folder = tmp / "out" / f"{model}_{campaign}_{regime or 'no-regime'}"
    got = {(r["summary"], r["method"]): r for r in read(folder / "statistics.csv")}
    assert got == want
    combined = read(tmp / "out" / "statistics.csv")
    block = {
        (r["summary"], r["method"]): {k: v for k, v in r.items() if k not in BY}
        for r in combined
        if (r["model"], r["campaign"], r["regime"]) == stratum
    }
    assert block == want
    assert {r["verdict"] for (_, m), r in want.items() if m == reference} == {"baseline"}
    # 12 benchmarks, the domains math and science (logic is logiqa alone) and the average;
    # 3 seeds, so no verdict is possible
    assert len({s for s, _ in want}) == 12 + 2 + 1
    assert {r["verdict_possible"] for r in want.values()} == {"", "False"}


def test_the_index_lists_every_stratum_and_why_one_is_not_compared(reported):
    tmp, _ = reported
    text = (tmp / "out" / "report.md").read_text()
    assert text.count("\n## model=") == 12
    assert "12 of 13 strata compared" in text
    assert (
        "- note: model=qwen2.5-1.5b, campaign=select, regime=long: not compared, a single "
        "method (baseline): nothing to compare it with"
    ) in text
    assert "| qwen2.5-1.5b | select | long | baseline | 0 | — | not compared (see the notes) |" in (
        text
    )
    assert (
        "| llama-3.1-8b | mixer | (empty) | static | 4 | 3 | no (3 paired seeds) | 0 | 0 | 4 | "
        "[llama-3.1-8b_mixer_no-regime/report.md](llama-3.1-8b_mixer_no-regime/report.md) |"
    ) in text
    page = (tmp / "out" / "report.html").read_text()
    assert page.count('<section id="') == 1 + 12 + 2
    # words where no number is meant: no "inf" or "nan" in any table or sentence
    for f in [tmp / "out" / "report.md", *(tmp / "out").glob("*/report.md")]:
        assert not re.search(r"\b(inf|nan)\b", f.read_text(), re.I), f
    assert not (tmp / "out" / "qwen2.5-1.5b_select_long").exists()


def test_references_per_stratum_and_errors_that_list_the_methods(tmp_path):
    table = read_table(write_paper_csv(tmp_path / "r.csv"), by=BY, scale=0.01)
    labels = [s.label for s in table.strata]
    refs = dict(zip(labels, references(table)))  # default: "baseline" where present
    assert refs["model=llama-3.1-8b, campaign=mixer, regime=(empty)"] is None
    assert refs["model=llama-3.1-8b, campaign=select, regime=(empty)"] == "baseline"
    mixer = table.strata[labels.index("model=llama-3.1-8b, campaign=mixer, regime=(empty)")]
    assert skip_reason(mixer, None) == (
        "no reference (baseline) among its methods: " + ", ".join(mixer.methods)
    )
    assert references(table, ("static", "baseline"))[labels.index(mixer.label)] == "static"
    with pytest.raises(ConfigError) as e:
        references(table, ("ppo",))
    message = str(e.value)
    assert message.startswith("--baseline 'ppo': not a method of ")
    methods = message.split("; methods: ")[1].split(", ")
    # select 5, reweight 3 besides its baseline, mixer 5
    assert "static" in methods and "baseline" in methods and len(methods) == 13
