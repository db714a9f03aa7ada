"""docs/harness.md documents every experiment key, and its example experiment parses."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from dataflex_rl.harness.running.experiment import (
    Budget,
    Evaluation,
    Resources,
    parse_experiment,
)
from dataflex_rl.harness.statistics.analysis import StatsOptions

DOC = Path(__file__).resolve().parents[3] / "docs" / "harness.md"


@pytest.mark.parametrize(
    "section, cls",
    [
        ("budget", Budget),
        ("evaluation", Evaluation),
        ("statistics", StatsOptions),
        ("resources", Resources),
    ],
)
def test_every_key_is_documented(section, cls):
    text = DOC.read_text()
    for f in dataclasses.fields(cls):
        assert f"`{section}.{f.name}`" in text, f"docs/harness.md lacks {section}.{f.name}"


def test_example_experiment_parses():
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    exp = parse_experiment(yaml.safe_load(block))
    assert exp.labels == ["baseline", "difffilter", "soft2"]


def test_compare_dry_run_lists_the_matrix(capsys, tmp_path):
    from tests.unit.harness.reporting.test_report import run_cli

    root = DOC.parents[1]
    assert (
        run_cli(
            [
                "compare",
                str(root / "configs/experiments/quick.yaml"),
                "--dry-run",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[0].split()[:3] == ["baseline", "seed", "0"]


def test_wide_table_example_matches_the_reader(tmp_path):
    """The wide CSV header and domains YAML in docs/harness.md are what the tests read."""
    from dataflex_rl.harness.statistics.results_table import read_domains
    from tests.release_table import BENCHMARKS, HEADER

    text = DOC.read_text()
    yaml_block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "math500" in b)
    (tmp_path / "domains.yaml").write_text(yaml_block)
    assert read_domains(tmp_path / "domains.yaml") == BENCHMARKS
    csv_block = next(b for b in re.findall(r"```csv\n(.*?)```", text, re.S) if "run_id" in b)
    assert csv_block.splitlines()[0].split(",") == HEADER
