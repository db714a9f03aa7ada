"""``dataflex-rl gate``: exit 0 / 1 / 3 on hand-worked differences, the summary line, the JSON
verdict, the one-line errors (exit 2), and it never imports torch."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

from dataflex_rl.cli import main
from tests.unit.cli.test_cli_startup import _python

#: paired differences against main (0.5 on every seed): cheap within ±0.005 on all 6 seeds
#: (each one-sided p = 1/64, Holm over 2: 2/64 = 0.031), broken below -0.005 on every seed
CHEAP = [0.002, -0.001, 0.003, 0.0, 0.001, 0.002]
BROKEN = [-0.02, -0.03, -0.04, -0.05, -0.06, -0.03]


def _table(path, **deltas):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seed", "benchmark", "score"])
        for s in range(len(next(iter(deltas.values())))):
            w.writerow(["main", s, "bench", 0.5])
            w.writerows([m, s, "bench", 0.5 + d[s]] for m, d in deltas.items())
    return str(path)


def _gate(capsys, *argv):
    code = main(["gate", *argv, "--n-boot", "200"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_non_inferior_passes_fails_and_names_each_check(tmp_path, capsys):
    table = _table(tmp_path / "t.csv", cheap=CHEAP, broken=BROKEN)
    args = ("--from-csv", table, "--baseline", "main", "--require", "non-inferior")
    code, out, _ = _gate(capsys, *args, "--margin", "0.005", "--json", str(tmp_path / "g.json"))
    lines = out.splitlines()
    assert code == 1 and lines[-1].startswith("gate FAIL: 1 of 2 comparison(s) not worse")
    assert lines[0].startswith("PASS") and "cheap vs main" in lines[0]
    assert "equivalent within ±0.5 points (p 0.031)" in lines[0]
    assert lines[1].startswith("FAIL") and "worse by more than 0.5 points" in lines[1]
    verdict = json.loads((tmp_path / "g.json").read_text())
    assert (verdict["outcome"], verdict["exit_code"], verdict["margin"]) == ("fail", 1, 0.005)
    assert [(c["method"], c["outcome"], c["p_holm"]) for c in verdict["checks"]] == [
        ("cheap", "pass", 2 / 64),
        ("broken", "fail", 2 / 64),
    ]
    code, out, _ = _gate(capsys, *args, "--margin", "0.005", "--method", "cheap")
    assert code == 0 and out.splitlines()[-1].startswith("gate PASS: 1 of 1")


def test_too_few_seeds_is_inconclusive_with_the_seeds_needed(tmp_path, capsys):
    # 3 seeds: the one-sided floor 1/8 > 0.05, whatever the scores
    table = _table(tmp_path / "t.csv", cheap=CHEAP[:3])
    code, out, err = _gate(
        capsys,
        "--from-csv",
        table,
        "--require",
        "non-inferior",
        "--margin",
        "0.005",
        "--baseline",
        "main",
        "--json",
        "-",
    )
    verdict = json.loads(out)
    (check,) = verdict["checks"]
    assert code == 3 and verdict["outcome"] == "inconclusive" and check["n_pairs"] == 3
    assert check["seeds_needed"] >= 5
    assert err.splitlines()[-1].endswith(
        f"about {check['seeds_needed']} paired seeds needed (if the arms are equal)"
    )


def test_better_is_the_two_sided_verdict(tmp_path, capsys):
    # +0.03 to +0.06 on 6 seeds: every sign flip but the identity lowers the mean, p = 2/64
    table = _table(tmp_path / "t.csv", up=[0.03, 0.04, 0.05, 0.06, 0.04, 0.05])
    code, out, _ = _gate(capsys, "--from-csv", table, "--baseline", "main")
    assert code == 0 and "better, Δ +4.5 points (p 0.031)" in out
    table = _table(tmp_path / "t.csv", down=BROKEN)
    assert _gate(capsys, "--from-csv", table, "--baseline", "main")[0] == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--require", "non-inferior"], "--require non-inferior needs --margin M"),
        (["--method", "chep"], "--method chep: not a compared method. Did you mean 'cheap'?"),
        (["--summary", "benchh"], "--summary benchh: not a summary."),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, capsys, extra, message):
    table = _table(tmp_path / "t.csv", cheap=CHEAP)
    code, _, err = _gate(capsys, "--from-csv", table, *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_gate_never_imports_torch(tmp_path):
    table = _table(tmp_path / "t.csv", cheap=CHEAP)
    out = _python(
        f"""
        import sys
        from dataflex_rl.cli import main
        code = main(["gate", "--from-csv", {table!r}, "--n-boot", "200"])
        print(code, "torch" in sys.modules)
        """
    )
    assert out.splitlines()[-1] == "3 False"


def test_the_docs_show_what_the_gate_prints_on_the_shipped_table(capsys, monkeypatch):
    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    doc = (root / "docs" / "analysis.md").read_text()
    block = re.search(r"On the\nshipped table.*?```\n(.*?)```", doc, re.S).group(1)
    commands = re.split(r"^\$ ", block, flags=re.M)[1:]
    codes = []
    for chunk in commands:
        command, *shown = chunk.rstrip("\n").split("\n")
        code = main(shlex.split(command)[1:])
        out = capsys.readouterr()
        if "--json -" in command:  # the JSON on stdout is the next block; lines on stderr
            want = re.search(r"```json\n(.*?)```", doc, re.S).group(1)
            assert json.loads(out.out) == json.loads(want) and out.err and not shown
        else:
            assert out.out.splitlines() == shown
        codes.append(code)
    assert codes == [1, 0, 3]
