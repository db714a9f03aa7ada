"""User errors through the ``dataflex-rl`` CLI: one line, exit status 2, no traceback;
``--debug`` shows the traceback (issue 12, item 11). Also the CSV inputs a user brings: a UTF-8
BOM just works; seeds written ``1.0`` in one arm and ``1`` in another pair."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataflex_rl.cli import main
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics.results import read_proportions_csv, seed_label
from dataflex_rl.harness.statistics.results_table import read_results_csv

SRC = Path(__file__).resolve().parents[3] / "src"


def _csv(path: Path, text: str, bom: bool = False) -> Path:
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    return path


def _results(seed_fmt=str) -> str:
    return "method,seed,benchmark,score\n" + "".join(
        f"{m},{seed_fmt(s) if m == 'new' else s},b,{0.5 + 0.01 * s + (0.02 if m == 'new' else 0)}\n"
        for m in ("baseline", "new")
        for s in range(4)
    )


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "no/such/engine.yaml"], "no/such/engine.yaml"),
        (["report", "--from-csv", "no/such.csv"], "no/such.csv: no such file"),
        (["compare", "no/such/experiment.yaml"], "no/such/experiment.yaml"),
        (["describe", "no_such_component"], "no_such_component"),
    ],
)
def test_user_errors_are_one_line_with_status_2(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dataflex-rl: error: ") and expected in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("where", [0, -1])
def test_debug_shows_the_traceback(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["report", "--from-csv", "no/such.csv"]
    argv.insert(len(argv) if where == -1 else 0, "--debug")
    with pytest.raises(ConfigError, match="no such file"):
        main(argv)


def test_the_installed_command_prints_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataflex_rl.cli",
            "report",
            "--from-csv",
            str(tmp_path / "missing.csv"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip() == f"dataflex-rl: error: {tmp_path / 'missing.csv'}: no such file"


def test_a_non_config_error_points_to_debug(monkeypatch, capsys):
    from dataflex_rl import cli

    def boom(args):
        raise FileNotFoundError(2, "No such file or directory", "data/x.jsonl")

    monkeypatch.setattr(cli, "_cmd_list", boom)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert "data/x.jsonl: No such file or directory" in err and "--debug" in err


def test_a_csv_with_a_bom_just_works(tmp_path, capsys):
    plain = read_results_csv(_csv(tmp_path / "plain.csv", _results()))
    bom = read_results_csv(_csv(tmp_path / "bom.csv", _results(), bom=True))
    assert bom == plain and bom[0].method == "baseline"
    props = "method,seed,step,domain,target,actual\nucb,1,0,math,0.5,0.4\n"
    assert read_proportions_csv(_csv(tmp_path / "p.csv", props, bom=True)) == read_proportions_csv(
        _csv(tmp_path / "q.csv", props)
    )
    assert (
        main(
            [
                "report",
                "--from-csv",
                str(tmp_path / "bom.csv"),
                "--no-plots",
                "--out",
                str(tmp_path / "rep"),
            ]
        )
        == 0
    )


def test_seeds_written_as_floats_pair_with_ints(tmp_path):
    ints = read_results_csv(_csv(tmp_path / "a.csv", _results()))
    floats = read_results_csv(_csv(tmp_path / "b.csv", _results(lambda s: f"{s}.0")))
    assert [r.seed for r in floats] == [r.seed for r in ints] == ["0", "1", "2", "3"] * 2
    assert [seed_label(s, "x") for s in ("1", "1.0", " 1. ", "1e0", "-2.0", "s1")] == [
        "1",
        "1",
        "1",
        "1",
        "-2",
        "s1",
    ]


@pytest.mark.parametrize("bad", ["1.5", "nan", "inf"])
def test_a_non_integral_seed_is_refused_naming_the_line(tmp_path, bad):
    text = f"method,seed,benchmark,score\nbaseline,1,b,0.5\nnew,{bad},b,0.6\n"
    with pytest.raises(ConfigError, match=r"b\.csv:3: seed .* is not an integer"):
        read_results_csv(_csv(tmp_path / "b.csv", text))
