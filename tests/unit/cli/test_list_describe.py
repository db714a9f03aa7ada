"""``dataflex-rl list`` / ``describe`` through `dataflex_rl.cli.main`."""

import pytest

from dataflex_rl.cli import main
from dataflex_rl.core.base import (
    CURRICULA,
    MIXERS,
    REWEIGHTERS,
    SCORERS,
    SELECTORS,
    SKIP_POLICIES,
)
from dataflex_rl.presets import PRESETS


def _rows(out):
    return [
        line.split()[:2] if not line.startswith("skip policy") else ["skip policy", line.split()[2]]
        for line in out.splitlines()
        if line.strip()
    ]


def test_list_shows_every_preset_and_component(capsys):
    assert main(["list"]) == 0
    rows = _rows(capsys.readouterr().out)
    expected = [["preset", n] for n in PRESETS]
    for kind, reg in (
        ("scorer", SCORERS),
        ("selector", SELECTORS),
        ("reweighter", REWEIGHTERS),
        ("mixer", MIXERS),
        ("skip policy", SKIP_POLICIES),
        ("curriculum", CURRICULA),
    ):
        expected += [[kind, n] for n in reg.names()]
    assert rows == expected


def test_list_one_kind(capsys):
    assert main(["list", "--kind", "mixer"]) == 0
    out = capsys.readouterr().out
    assert [r[1] for r in _rows(out)] == MIXERS.names()
    assert "UCB1 over domains" in out


def test_list_unknown_kind_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["list", "--kind", "mixers"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_describe_preset(capsys):
    assert main(["describe", "difffilter"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# difffilter")
    assert "solve_rate" in out and "band" in out and "DAPO" in out


def test_describe_component_lists_its_parameters(capsys):
    assert main(["describe", "max_variance"]) == 0
    out = capsys.readouterr().out
    assert "| `keep_fraction` | float | 0.5 | (0, 1] |" in out
    assert "- needs prompt groups: yes" in out and "PODS" in out


def test_describe_a_name_used_twice_shows_both(capsys):
    # "softmax" is a preset, a reweighter and a mixer
    assert main(["describe", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "## preset `softmax`" in out
    assert "## reweighter `softmax`" in out and "## mixer `softmax`" in out


def test_describe_unknown_name_exits_2_with_a_suggestion(capsys):
    assert main(["describe", "maxvr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dataflex-rl: error: nothing called 'maxvr'")
    assert "Did you mean 'maxvar'" in err and "dataflex-rl list" in err


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "dataflex-rl list" in capsys.readouterr().out
