"""The engine trains from a parquet file: the CLI end to end, rewards from the declared
verifiers, exact resume, and a changed file refused on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataflex_rl.cli import main
from dataflex_rl.hosts.engine.config import DEFAULT_DIFFICULTY, load_config
from dataflex_rl.hosts.engine.run import run_training
from dataflex_rl.hosts.engine.runlog import read_metrics
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer
from dataflex_rl.tasks import build_taskset, save_dataset
from dataflex_rl.tasks.verifiers import build_verifier

pytest.importorskip("pyarrow")
pytest.importorskip("math_verify")

ROOT = Path(__file__).resolve().parents[2]
VERIFIERS = {"math": "math", "logic": "exact", "science": {"kind": "numeric", "rel_tol": 1e-4}}
CONFIG = """\
policy: tiny
steps: 3
tasks:
  source: files
  train: data/train.parquet
  eval: data/test.parquet
  verifiers: {math: math, logic: exact, science: {kind: numeric, rel_tol: 1.0e-4}}
grpo: {prompts_per_step: 6, group_size: 4}
eval: {per_domain: 6, samples: 0, every: 0}
log: {progress: false, plots: false, checkpoint_every: 2}
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """verl-schema parquet files of the three built-in domains (the tiny policy knows them, so
    rewards are not all zero)."""
    root = tmp_path_factory.mktemp("dataset")
    ts = build_taskset(train_size=40, eval_size=10, seed=7, difficulty=dict(DEFAULT_DIFFICULTY))
    save_dataset([p for d in ts.domains for p in ts.train[d]], root / "data" / "train.parquet")
    save_dataset([p for d in ts.domains for p in ts.eval[d]], root / "data" / "test.parquet")
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def test_cli_trains_from_parquet_and_records_the_dataset(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(data_dir / "cfg.yaml"), "--out", str(out), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the metric's group header (eval.samples 0 here: greedy alone), then the domains
    assert lines[0].split() == ["greedy", "accuracy"]
    assert lines[1].split()[:4] == ["strategy", "logic", "math", "science"]
    train = [r for r in read_metrics(out) if r["kind"] == "train"]
    assert [r["step"] for r in train] == [0, 1, 2]
    assert all(0.0 <= r["train/reward"] <= 1.0 for r in train)
    record = json.loads((out / "dataset.json").read_text())
    assert record["identity"]["train"][0]["path"] == str(data_dir / "data" / "train.parquet")
    assert record["sizes"]["science"]["settings"]["verifier"] == VERIFIERS["science"]
    assert (out / "tokenizer" / "char_tokenizer.json").is_file()


def test_rewards_come_from_the_declared_verifiers(data_dir):
    cfg = load_config(data_dir / "cfg.yaml")
    tr = EmbeddedTrainer(cfg, "baseline")
    problems, _, _ = tr.driver.draw(tr.config.grpo.prompts_per_step, 0)
    rollout, rewards, _, _ = tr.generation(0).rollout(problems)
    texts = [tr.policy.tokenizer.decode(r) for r in rollout.response_ids.tolist()]
    checks = {d: build_verifier(spec) for d, spec in VERIFIERS.items()}
    rows = [problems[i] for i in rollout.prompt_index.tolist()]
    expected = [checks[p.domain](t, p.answer) for p, t in zip(rows, texts)]
    assert rewards.tolist() == expected and 0 < sum(expected) < len(expected)
    # hand-worked: numeric takes another spelling, exact normalizes case, math is symbolic
    sci = tr.taskset.train["science"][0]
    assert tr.taskset.verify(sci, sci.answer + ".0") == 1.0
    assert tr.taskset.verify(sci, str(int(sci.answer) + 1)) == 0.0
    logic = tr.taskset.train["logic"][0]
    assert tr.taskset.verify(logic, logic.answer.upper()) == 1.0
    math = tr.taskset.train["math"][0]
    assert tr.taskset.verify(math, math.answer) == 1.0


def test_resume_is_exact_and_a_changed_file_is_refused(data_dir, tmp_path):
    cfg = load_config(data_dir / "cfg.yaml")
    full = run_training(cfg, "baseline", steps=4, out_dir=tmp_path / "full")
    run_training(cfg, "baseline", steps=2, out_dir=tmp_path / "cut")
    resumed = run_training(cfg, "baseline", steps=4, out_dir=tmp_path / "cut", resume=True)
    assert resumed["parameter_sha256"] == full["parameter_sha256"]

    # same seed, same data order: the two runs drew the same prompts
    def rewards(run: str) -> list:
        return [r["train/reward"] for r in read_metrics(tmp_path / run) if r["kind"] == "train"]

    assert rewards("full") == rewards("cut") and len(rewards("full")) == 4
    import pyarrow.parquet as pq

    changed = tmp_path / "changed"
    (changed / "data").mkdir(parents=True)
    (changed / "cfg.yaml").write_text(CONFIG)
    table = pq.read_table(data_dir / "data" / "train.parquet")
    pq.write_table(table, changed / "data" / "train.parquet")
    pq.write_table(
        pq.read_table(data_dir / "data" / "test.parquet"), changed / "data" / "test.parquet"
    )
    cfg2 = load_config(changed / "cfg.yaml")
    run_training(cfg2, "baseline", steps=2, out_dir=tmp_path / "c")
    pq.write_table(table.slice(1), changed / "data" / "train.parquet")  # one row fewer
    with pytest.raises(ValueError, match=r"cannot resume: the dataset changed .*train.parquet"):
        run_training(cfg2, "baseline", steps=3, out_dir=tmp_path / "c", resume=True)


def test_the_shipped_dataset_example_trains(tmp_path):
    cfg = load_config(
        ROOT / "examples" / "dataset.yaml",
        dotted=["steps=1", "grpo.prompts_per_step=3", "grpo.group_size=2", "eval.per_domain=2"],
    )
    cfg.log.plots = cfg.log.progress = False
    summary = run_training(cfg, out_dir=tmp_path / "ex")
    assert summary["steps"] == 1 and set(cfg.tasks.domains) == {"math", "logic", "science"}
