"""``dataflex-rl export``: the default tasks round-trip through the engine's own dataset loader
(the same prompts, answers and verdicts as the generators), overrides and refusals, --help."""

from __future__ import annotations

import json
from pathlib import Path

from dataflex_rl.cli import main
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.trainer import tasks_from_config

ROOT = Path(__file__).resolve().parents[3]


def _triples(problems):
    return [(p.key, p.prompt, p.answer) for p in problems]


def test_the_default_tasks_read_back_as_the_engine_generates_them(tmp_path, capsys):
    assert main(["export", "tasks", "--out", str(tmp_path)]) == 0
    assert "math: 2000 training, 200 held-out" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "tasks.json").read_text())
    generated = tasks_from_config(load_config())
    files = load_config(
        {
            "tasks": {
                "source": "files",
                "train": str(tmp_path / manifest["train"]),
                "eval": [str(tmp_path / manifest["eval"][d]) for d in manifest["domains"]],
                "verifiers": manifest["verifiers"],
            }
        }
    )
    back = tasks_from_config(files)
    assert back.domains == generated.domains == ("math", "logic", "science")
    for d in generated.domains:
        assert _triples(back.train[d]) == _triples(generated.train[d])
        assert _triples(back.eval[d]) == _triples(generated.eval[d])
        wrong = generated.eval[d][1].answer
        for p, q in zip(back.eval[d][:50], generated.eval[d][:50]):
            assert back.verify(p, q.answer) == generated.verify(q, q.answer) == 1.0
            assert back.verify(p, wrong) == generated.verify(q, wrong)
    settings = manifest["settings"]
    assert settings["difficulty"] == {"math": 5, "logic": 3, "science": 4}
    assert (settings["seed"], settings["eval_seed"], settings["eval_per_domain"]) == (0, 0, 200)


def test_overrides_pick_the_tasks_and_the_evaluated_prefix(tmp_path):
    argv = ["export", "tasks", "tasks.domains=[logic]", "tasks.train_size=30"]
    assert main([*argv, "eval.per_domain=7", "--out", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "tasks.json").read_text())
    assert manifest["rows"] == {"train": {"logic": 30}, "eval": {"logic": 7}}
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["logic.parquet"]


def test_refusals_are_one_line(tmp_path, capsys):
    dataset = str(ROOT / "examples" / "dataset.yaml")
    assert main(["export", "tasks", dataset, "--out", str(tmp_path / "a")]) == 2
    assert "tasks.source is 'files'" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("")
    assert main(["export", "policy", "--out", str(tmp_path / "b")]) == 2
    assert "already holds x; choose an empty directory or pass --force" in capsys.readouterr().err


def test_help_explains_both_exports(capsys):
    assert main(["export"]) == 0
    out = capsys.readouterr().out
    assert "export policy --out" in out and "export tasks --out" in out
    assert "AutoTokenizer.from_pretrained" in out and "compute_score" in out
