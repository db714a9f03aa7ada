"""Every numeric command-line option has a declared range, checked before any work (issue 12
item 8), and every command that takes a config takes ``KEY=VALUE`` overrides (issue 13 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataflex_rl.cli import build_parser, main
from dataflex_rl.hosts.engine.host import EngineHost

#: the engine host (the engine settings of an experiment: `EngineHost.engine_config`)
ENGINE = EngineHost()
ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "configs" / "experiments" / "quick.yaml")
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


# the CSV / YAML named do not exist: a refusal proves the range is checked before any work
@pytest.mark.parametrize(
    "argv, message",
    [
        (["report", "--from-csv", "none.csv", "--alpha", "1.5"], "argument --alpha: must be < 1.0"),
        (["report", "--from-csv", "none.csv", "--alpha", "0"], "argument --alpha: must be > 0.0"),
        (["report", "--from-csv", "none.csv", "--power", "1"], "argument --power: must be < 1.0"),
        (
            ["report", "--from-csv", "none.csv", "--n-boot", "0"],
            "argument --n-boot: must be >= 100",
        ),
        (["report", "--from-csv", "none.csv", "--seed", "-1"], "argument --seed: must be >= 0"),
        (
            ["report", "--from-csv", "none.csv", "--alpha", "nan"],
            "argument --alpha: must be a finite number",
        ),
        (["compare", "none.yaml", "--seeds", "0"], "argument --seeds: must be >= 1, got 0"),
        (["compare", "none.yaml", "--workers", "0"], "argument --workers: must be >= 1"),
        (["compare", "none.yaml", "--max-seeds", "0"], "argument --max-seeds: must be >= 1"),
        (["compare", "none.yaml", "--round", "0"], "argument --round: must be >= 1"),
        (["compare", "none.yaml", "--margin", "-0.1"], "argument --margin: must be > 0.0"),
        (["compare", "none.yaml", "--seeds", "2.5"], "argument --seeds: expected an integer"),
        (["train", "none.yaml", "--steps", "-3"], "argument --steps: must be >= 0, got -3"),
        (["train", "none.yaml", "--seed", "-1"], "argument --seed: must be >= 0"),
        (["train", "none.yaml", "--workers", "0"], "argument --workers: must be >= 1"),
        (["bootstrap", "--steps", "0"], "argument --steps: must be >= 1"),
        (["bootstrap", "--batch-size", "0"], "argument --batch-size: must be >= 1"),
        (["bootstrap", "--lr", "0"], "argument --lr: must be > 0.0"),
    ],
)
def test_numeric_options_are_refused_before_any_work(argv, message, capsys):
    assert message in _refused(argv, capsys)


def test_every_numeric_option_shows_its_range_in_help():
    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    numeric = 0
    for name, sub in subs.items():
        sub.format_help()  # (a command's arguments may be added when it is used)
        for action in sub._actions:
            if getattr(action.type, "range", None) is not None:
                numeric += 1
                assert f"range {action.type.range}" in (action.help or ""), (name, action.dest)
            assert action.type not in (int, float), f"{name} {action.dest}: no declared range"
    assert numeric >= 16


def test_help_lists_the_config_keys_with_ranges(capsys):
    for cmd, key in (("train", "optim.lr"), ("compare", "statistics.alpha")):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        out = capsys.readouterr().out
        assert f"\n  {key}\n" in out
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "range (0, 1)" in capsys.readouterr().out


def test_train_override_with_an_unknown_key_is_refused_naming_it(capsys):
    assert main(["train", QUICKSTART, "optim.lrr=3e-4"]) == 2
    err = capsys.readouterr().err
    assert "override optim.lrr=3e-4: unknown key 'lrr' of optim. Did you mean 'lr'?" in err


def test_train_override_value_is_checked_like_the_file(capsys):
    assert main(["train", QUICKSTART, "optim.lr=-1"]) == 2
    assert "error: override optim.lr=-1: must be >= 0.0, got -1\n" in capsys.readouterr().err


def test_train_strategy_override_runs_that_strategy_alone(monkeypatch, capsys):
    # quickstart.yaml has strategies [baseline, difffilter]; `strategy=maxvar` (the example of
    # train --help) runs maxvar alone instead of being ignored
    import dataflex_rl.hosts.engine.run as run

    seen = []

    def fake_run(config, strategy, **kw):
        seen.append((strategy, config.strategies))
        return {"out_dir": "o", "parameter_sha256": "0" * 64}

    monkeypatch.setattr(run, "run_training", fake_run)
    monkeypatch.setattr(run, "format_table", lambda rows: "table")
    monkeypatch.setattr(
        "dataflex_rl.harness.running.runner.side_by_side",
        lambda *a, **k: pytest.fail("strategy=maxvar ran the config's strategies"),
    )
    assert main(["train", QUICKSTART, "strategy=maxvar"]) == 0
    assert main(["train", QUICKSTART, "strategy.select.preset=maxvar"]) == 0
    assert seen == [("maxvar", []), ({"select": {"preset": "maxvar"}}, [])]
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "strategy=maxvar" in capsys.readouterr().out


@pytest.mark.parametrize(
    "override", ["strategy=maxvr", "strategy.select.preset=maxvr", "strategies=[maxvr]"]
)
def test_train_unknown_strategy_override_is_refused_before_any_work(override, capsys):
    assert main(["train", QUICKSTART, override]) == 2
    err = capsys.readouterr().err
    assert "'maxvr'. Did you mean 'maxvar'" in err and "difffilter" in err


def test_proportions_of_a_misspelt_domain_are_refused_before_any_work(tmp_path, capsys):
    out = str(tmp_path / "o")
    argv = ["compare", QUICK, "engine.tasks.proportions.mth=0.5", "--dry-run", "--out", out]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "tasks.proportions: unknown domain 'mth'. Did you mean 'math'?" in err
    assert not (tmp_path / "o").exists()
    assert main(["train", QUICKSTART, "tasks.proportions.mth=0.5", "--out", out]) == 2
    assert "unknown domain 'mth'. Did you mean 'math'?" in capsys.readouterr().err


def test_errors_name_the_file_or_the_override_that_holds_the_bad_value(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("optim:\n  lr: abc\n")
    assert main(["train", str(cfg), "steps=3"]) == 2
    assert f"error: {cfg}: optim.lr: expected float, got str ('abc')\n" in capsys.readouterr().err
    # the review's reproduction: the key and the value given, named by the override
    for value, message in [
        ("abc", "expected int | list[int], got str ('abc')"),
        ("-1", "must be >= 0, got -1"),
    ]:
        assert main(["compare", QUICK, "--dry-run", f"seeds={value}"]) == 2
        assert f"error: override seeds={value}: {message}\n" in capsys.readouterr().err


def test_compare_overrides_reach_the_plan(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "compare",
                QUICK,
                "seeds=3",
                "budget.steps=7",
                "engine.optim.lr=0.01",
                "--out",
                str(out),
                "--dry-run",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 * 3  # two strategies x three seeds
    from dataflex_rl.harness.running.experiment import load_experiment

    exp = load_experiment(QUICK, dotted=["budget.steps=7", "engine.optim.lr=0.01"])
    assert exp.budget.steps == 7 and ENGINE.engine_config(exp).optim.lr == 0.01
    assert ENGINE.engine_config(exp).steps == 7


def test_compare_override_errors_name_the_key(capsys):
    assert main(["compare", QUICK, "budget.stepz=7", "--dry-run"]) == 2
    assert (
        "override budget.stepz=7: unknown key 'stepz' of budget. Did you mean 'steps'?"
        in capsys.readouterr().err
    )
    assert main(["compare", QUICK, "statistics.alpha=1.5", "--dry-run"]) == 2
    assert "override statistics.alpha=1.5: must be < 1.0, got 1.5" in capsys.readouterr().err
    assert main(["compare", QUICK, "engine.optim.lr=-2", "--dry-run"]) == 2
    assert "override engine.optim.lr=-2: must be >= 0.0, got -2" in capsys.readouterr().err


def test_overrides_after_an_option_still_reach_the_config(tmp_path, capsys):
    # argparse alone refuses words after an option as unrecognized; they are overrides too
    out = tmp_path / "o"
    argv = ["compare", QUICK, "--out", str(out), "--dry-run", "seeds=3", "budget.steps=7"]
    assert main(argv) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2 * 3
    assert main(["train", QUICKSTART, "--steps", "1", "optim.lrr=3e-4"]) == 2
    assert "override optim.lrr=3e-4: unknown key 'lrr' of optim" in capsys.readouterr().err


def test_a_stray_word_after_options_is_still_a_usage_error(capsys):
    err = _refused(["train", QUICKSTART, "--steps", "1", "stray"], capsys)
    assert "unrecognized arguments: stray" in err
    err = _refused(["train", QUICKSTART, "--steps", "1", "--bogus=1"], capsys)
    assert "unrecognized arguments: --bogus=1" in err
