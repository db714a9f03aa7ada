"""The engine on loaded datasets: config checks, vocabulary extension, context fitting."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.policy import build_tiny_policy, extend_vocabulary, parameter_hash
from dataflex_rl.hosts.engine.taskio import dataset_identity, fit_to_context
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from dataflex_rl.tasks import Problem, TaskSet
from tests.unit.hosts.engine.conftest import SMALL_ARCH

VERIFIERS = {"math": "math", "logic": "exact", "science": {"kind": "numeric", "rel_tol": 1e-4}}


def _rows():
    rows = []
    for i in range(8):
        for domain, prompt, truth in (
            ("math", f"{i}+{i}=", str(2 * i)),
            ("logic", f"Is {i} odd?", "yes" if i % 2 else "no"),
            ("science", f"{i}km=?m", str(1000 * i)),
        ):
            rows.append(
                {
                    "data_source": "test",
                    "domain": domain,
                    "prompt": [{"role": "user", "content": prompt}],
                    "reward_model": {"style": "rule", "ground_truth": truth},
                }
            )
    return rows


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _files_config(train, **tasks):
    return load_config(
        {
            "tasks": {"source": "files", "train": str(train), "verifiers": VERIFIERS, **tasks},
            "grpo": {"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 6},
            "eval": {"per_domain": 2, "samples": 0},
            "log": {"progress": False, "plots": False},
        }
    )


@pytest.mark.parametrize(
    "tasks, message",
    [
        ({"train": "x.jsonl"}, "config.tasks.train: only used with source: files"),
        ({"source": "files"}, "config.tasks.train: required with source: files"),
        ({"source": "files", "train": "x"}, "config.tasks.verifiers: required with source: files"),
        (
            {"source": "files", "train": "x", "verifiers": {"a": "exct"}},
            "config.tasks.verifiers.a: unknown verifier kind 'exct'. Did you mean 'exact'?",
        ),
        (
            {"source": "files", "train": "x", "verifiers": {"a": {"kind": "numeric", "tol": 1}}},
            "config.tasks.verifiers.a.tol: unknown parameter of verifier 'numeric'",
        ),
        (
            {"source": "files", "train": "x", "verifiers": {"a": "exact"}, "domains": ["b"]},
            "config.tasks.domains: with source: files the domains are the keys of",
        ),
        (
            {"source": "files", "train": "x", "verifiers": {"a": "exact"}, "difficulty": {}},
            "config.tasks.difficulty: only used with source: generated",
        ),
        ({"source": "file"}, "config.tasks.source: must be one of 'generated', 'files'"),
        ({"sorce": "files"}, "config.tasks.sorce: unknown key. Did you mean 'source'?"),
        (
            {"source": "files", "train": "x", "verifiers": {"a": "exact"}, "eval_fraction": 1.0},
            "config.tasks.eval_fraction: must be < 1.0",
        ),
    ],
)
def test_tasks_config_errors_name_the_key(tasks, message):
    with pytest.raises(ConfigError) as e:
        load_config({"tasks": tasks})
    assert str(e.value).startswith(message), str(e.value)


def test_files_config_domains_are_the_verifier_keys_and_paths_resolve(tmp_path):
    (tmp_path / "data").mkdir()
    _jsonl(tmp_path / "data" / "t.jsonl", _rows())
    (tmp_path / "c.yaml").write_text(
        "tasks:\n  source: files\n  train: data/t.jsonl\n"
        "  verifiers: {science: numeric, math: math, logic: exact}\n"
    )
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.tasks.domains == ["science", "math", "logic"]
    assert cfg.tasks.train == str(tmp_path / "data" / "t.jsonl")
    ident = dataset_identity(cfg.tasks)
    assert ident["train"][0]["path"] == str((tmp_path / "data" / "t.jsonl").resolve())
    assert ident["eval"] == [] and len(ident["train"][0]["sha256"]) == 64
    assert dataset_identity(load_config().tasks) is None


def test_extend_vocabulary_appends_sorted_and_keeps_old_logits():
    tok = CharTokenizer.from_charset(["0123456789+="])
    policy = build_tiny_policy(tok, seed=0, **SMALL_ARCH)
    ids = torch.tensor([[tok.bos_id, *tok.encode("12+3=")]])
    before = policy.model(ids).logits
    torch.manual_seed(5)
    expected_next = torch.rand(1)
    torch.manual_seed(5)
    added = extend_vocabulary(policy, ["Is 3 odd?", "no"])
    assert torch.rand(1) == expected_next  # the global RNG is untouched
    assert added == [" ", "?", "I", "d", "n", "o", "s"]  # sorted, only the new ones
    assert policy.tokenizer.chars == [*tok.chars, *added]
    assert policy.tokenizer.encode("Is") == [4 + 12 + 2, 4 + 12 + 6]
    after = policy.model(ids).logits
    assert after.shape[-1] == before.shape[-1] + 7
    # old tokens keep their embeddings: the old logits are unchanged
    torch.testing.assert_close(after[..., : before.shape[-1]], before)
    assert extend_vocabulary(policy, ["no"]) == []  # nothing new: nothing changes
    # deterministic: the same data gives the same model, whatever order it comes in
    other = build_tiny_policy(tok, seed=0, **SMALL_ARCH)
    extend_vocabulary(other, ["no", "?sI 3 odd"])
    assert parameter_hash(other.model) == parameter_hash(policy.model)


def _problem(domain, prompt, answer):
    return Problem(f"{domain}:{prompt}", domain, prompt, answer)


def test_fit_to_context_drops_prompts_without_room_and_counts_long_answers():
    # context 20, budget 6: BOS + prompt + 6 <= 20, so a prompt may have 13 characters
    fits, too_long = "a" * 13, "b" * 14
    ts = TaskSet(
        ("x",),
        {
            "x": [
                _problem("x", fits, "123456"),
                _problem("x", too_long, "1"),
                _problem("x", "c", "12345"),
            ]
        },
        {"x": [_problem("x", "d", "1")]},
    )
    fitted, report = fit_to_context(ts, list, 20, 6)
    assert [p.prompt for p in fitted.train["x"]] == [fits, "c"]
    assert report["dropped"] == {"train": {"x": 1}, "eval": {"x": 0}}
    # '123456' needs 6 tokens + EOS > 6; '12345' fits with its EOS
    assert report["long_answers"]["train"] == {"x": 1}
    assert fit_to_context(ts, list, None, 6)[1]["dropped"]["train"] == {"x": 0}
    with pytest.raises(ConfigError, match="no train prompt of domain 'x' fits .* context of 7"):
        fit_to_context(ts, list, 7, 6)


def test_trainer_on_files_extends_the_vocabulary_and_warns_about_eval_text(tmp_path):
    rows = _rows()
    train = _jsonl(tmp_path / "train.jsonl", rows)
    held = [dict(r, prompt=[{"role": "user", "content": "Is 9 odd? Quickly!"}]) for r in rows[1:2]]
    held[0]["reward_model"] = {"ground_truth": "YES"}
    test = _jsonl(tmp_path / "test.jsonl", held)
    cfg = _files_config(train, eval=str(test))
    policy = build_tiny_policy(CharTokenizer.from_charset(["0123456789+="]), 0, **SMALL_ARCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = EmbeddedTrainer(cfg, "baseline", policy=policy)
    assert tr.domains == ("math", "logic", "science")
    assert set("Is odd?km") <= set(tr.policy.tokenizer.chars)
    assert tr.data_report["vocabulary_added"] == " ?Idekmnosy"
    unknown = tr.data_report["eval_unknown_characters"]
    assert unknown == {"logic": {"prompts": 1, "answers": 1, "chars": "!EQSYcilu"}}
    assert any("encoded as <unk>" in str(w.message) for w in caught)
    # the held-out prompt encodes with <unk> for what the training data never had
    assert tr.policy.tokenizer.encode("Q")[0] == CharTokenizer.unk_id
    state = tr.state_dict()
    assert state["vocabulary"] == tr.policy.tokenizer.chars
    assert state["dataset"]["eval"][0]["path"] == str(test.resolve())
    metrics = tr.train_step()
    assert metrics["engine/prompts_generated"] == 3.0


def test_trainer_drops_too_long_prompts_before_training(tmp_path):
    rows = _rows()
    rows[0]["prompt"] = "9" * 60  # a math prompt longer than the 64-token context allows
    cfg = _files_config(_jsonl(tmp_path / "t.jsonl", rows), eval_fraction=0.25)
    policy = build_tiny_policy(CharTokenizer.from_charset(["0123456789+="]), 0, **SMALL_ARCH)
    with pytest.warns(UserWarning, match=r"tasks.(train|eval): dropped prompts too long .* 64"):
        tr = EmbeddedTrainer(cfg, "baseline", policy=policy)
    dropped = tr.data_report["dropped"]
    assert dropped["train"]["math"] + dropped["eval"]["math"] == 1
    assert all("9" * 60 != p.prompt for ps in tr.taskset.train.values() for p in ps)
    every = [dict(r, prompt="9" * 60 + str(i)) for i, r in enumerate(rows)]
    cfg = _files_config(_jsonl(tmp_path / "long.jsonl", every))
    policy = build_tiny_policy(CharTokenizer.from_charset(["0123456789+="]), 0, **SMALL_ARCH)
    with pytest.raises(ConfigError, match="no train prompt of domain 'math' fits"):
        EmbeddedTrainer(cfg, "baseline", policy=policy)


def test_docs_name_every_dataset_key_and_verifier_parameter():
    import dataclasses

    from dataflex_rl.hosts.engine.config import TasksConfig
    from dataflex_rl.tasks.verifiers import VERIFIERS, verifier_kinds

    root = Path(__file__).resolve().parents[4]
    text = (root / "docs" / "datasets.md").read_text()
    for key in ("source", "train", "eval", "eval_fraction", "eval_seed", "verifiers"):
        assert key in {f.name for f in dataclasses.fields(TasksConfig)}
        assert f"tasks.{key}" in text, key
    for key in ("domain_key", "prompt_column", "answer_column"):
        assert f"`tasks.{key}`" in text, key
    for kind in verifier_kinds():
        assert f"| `{kind}` |" in text, kind
        for f in dataclasses.fields(VERIFIERS.get(kind)):
            assert f"`{f.name}`" in text, (kind, f.name)


def test_shipped_example_data_is_what_its_script_writes(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[4]
    data = root / "examples" / "data"
    subprocess.run(
        [sys.executable, str(data / "make_dataset.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (data / name).read_bytes(), name
    assert sum((data / n).stat().st_size for n in ("train.jsonl", "test.jsonl")) < 50_000


def test_an_experiment_resolves_its_data_files_against_its_folder(tmp_path):
    from dataflex_rl.harness.running.experiment import load_experiment
    from dataflex_rl.hosts.engine.host import EngineHost

    (tmp_path / "data").mkdir()
    _jsonl(tmp_path / "data" / "t.jsonl", _rows())
    (tmp_path / "exp.yaml").write_text(
        "name: d\nstrategies: [baseline, difffilter]\nseeds: 2\nengine:\n  tasks:\n"
        "    source: files\n    train: [data/t.jsonl]\n"
        "    verifiers: {math: math, logic: exact, science: numeric}\n"
    )
    cfg = EngineHost().engine_config(load_experiment(tmp_path / "exp.yaml"))
    assert cfg.tasks.train == [str(tmp_path / "data" / "t.jsonl")]
    assert cfg.tasks.domains == ["math", "logic", "science"]


def test_side_by_side_checks_the_data_before_any_run_starts(tmp_path, capsys):
    from dataflex_rl.cli import main

    _jsonl(tmp_path / "t.jsonl", _rows()[:-1] + [{"domain": "science", "prompt": "x"}])
    (tmp_path / "c.yaml").write_text(
        "steps: 1\nstrategies: [baseline, topk]\ntasks:\n  source: files\n  train: t.jsonl\n"
        "  verifiers: {math: math, logic: exact, science: numeric}\n"
    )
    out = tmp_path / "out"
    assert main(["train", str(tmp_path / "c.yaml"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "row 23 has no ground-truth column 'reward_model.ground_truth'" in err
    assert "columns present: domain, prompt" in err and not out.exists()


def test_compare_checks_the_data_before_any_run_starts(tmp_path, capsys):
    from dataflex_rl.cli import main

    _jsonl(tmp_path / "t.jsonl", _rows()[:-1] + [{"domain": "science", "prompt": "x"}])
    (tmp_path / "exp.yaml").write_text(
        "name: d\nstrategies: [baseline, topk]\nseeds: 2\nengine:\n  tasks:\n"
        "    source: files\n    train: t.jsonl\n"
        "    verifiers: {math: math, logic: exact, science: numeric}\n"
    )
    out = tmp_path / "out"
    argv = ["compare", str(tmp_path / "exp.yaml"), "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "row 23 has no ground-truth column 'reward_model.ground_truth'" in err
    assert not out.exists()
