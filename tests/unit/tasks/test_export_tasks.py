"""Generated tasks exported as verl-schema parquet, read back by the engine's own loader, and
the rewards (verl's compute_score, TRL's correct) against the domains' verifiers."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dataflex_rl.core.registry import ConfigError, import_object
from dataflex_rl.tasks import TaskSet, build_taskset, load_dataset
from dataflex_rl.tasks.base import Problem
from dataflex_rl.tasks.datasets import content_sha256
from dataflex_rl.tasks.export import export_tasks
from dataflex_rl.tasks.rewards import compute_score, correct
from dataflex_rl.tasks.verifiers import build_verifier

DOMAINS = ("math", "logic", "science")


@pytest.fixture(scope="module")
def tasks():
    # the engine's default levels, small pools
    return build_taskset(
        DOMAINS, 60, 20, seed=4, eval_seed=1, difficulty={"math": 5, "logic": 3, "science": 4}
    )


@pytest.fixture(scope="module")
def exported(tasks, tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    return out, export_tasks(tasks, out, eval_per_domain=15, settings={"seed": 4})


def _triples(problems):
    return [(p.key, p.prompt, p.answer) for p in problems]


def test_the_engine_loader_reads_back_the_same_prompts_and_answers(tasks, exported):
    out, manifest = exported
    back = load_dataset(
        out / manifest["train"],
        eval_path=[out / manifest["eval"][d] for d in DOMAINS],
        verifier=manifest["verifiers"],
    )
    assert back.domains == DOMAINS
    for d in DOMAINS:
        assert _triples(back.train[d]) == _triples(tasks.train[d])  # same order too
        assert _triples(back.eval[d]) == _triples(tasks.eval[d][:15])
    # the loaded domains verify as the generated ones: right, wrong, reformatted answers
    for d in DOMAINS:
        for p, q in zip(back.eval[d], tasks.eval[d]):
            for r in (q.answer, f" {q.answer}\n", q.answer + "0", tasks.eval[d][0].answer, ""):
                assert back.verify(p, r) == tasks.verify(q, r), (d, q.prompt, r)


def test_rows_follow_verls_schema(tasks, exported):
    out, manifest = exported
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert len(rows) == 3 * 60
    first_logic = rows[60]  # domain by domain; the index counts within the domain
    p = tasks.train["logic"][0]
    assert first_logic == {
        "data_source": "logic",
        "domain": "logic",
        "prompt": [{"role": "user", "content": p.prompt}],
        "ability": "logic",
        "reward_model": {"style": "rule", "ground_truth": p.answer},
        "extra_info": {"split": "train", "index": 0, "key": p.key, "domain": "logic"},
    }
    held = pq.read_table(out / "eval" / "science.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in held] == list(range(15))
    assert manifest["rows"] == {
        "train": dict.fromkeys(DOMAINS, 60),
        "eval": dict.fromkeys(DOMAINS, 15),
    }
    assert manifest["sha256"]["eval/math.parquet"] == content_sha256(out / "eval" / "math.parquet")
    assert manifest["settings"] == {"seed": 4}
    assert manifest["domain_settings"]["math"]["level"] == 5


def test_the_named_rewards_import():
    from dataflex_rl.tasks.export import REWARDS

    module = REWARDS["verl"]["path"].removeprefix("pkg://")
    assert import_object(f"{module}:{REWARDS['verl']['name']}", "verl") is compute_score
    assert import_object(REWARDS["trl"], "trl") is correct


@pytest.mark.parametrize(
    "domain, response, truth, score",
    [
        ("math", "23355899", "23355899", 1.0),
        ("math", " 23355899\n", "23355899", 1.0),  # outer whitespace stripped
        ("math", "023355899", "23355899", 1.0),  # integers canonical
        ("math", "23355899.", "23355899", 0.0),  # ... but not a trailing period
        ("math", "2335589", "23355899", 0.0),
        ("math", "", "0", 0.0),  # an empty response is wrong even against ""
        ("math", None, "0", 0.0),
        ("logic", "abceg", "abceg", 1.0),
        ("logic", "ABCEG", "abceg", 0.0),  # case kept (the 'exact' verifier would fold it)
        ("logic", "abce", "abceg", 0.0),
        ("science", "948000000", "948000000", 1.0),
        ("science", "948,000,000", "948000000", 0.0),  # not a numeric comparison
        ("science", "9.48e8", "948000000", 0.0),
    ],
)
def test_compute_score_hand_worked(domain, response, truth, score):
    assert compute_score(domain, response, truth) == score
    # the engine's verdict on the same answer: the generated domain's verify
    tasks = TaskSet((domain,), {domain: []}, {domain: []})
    assert tasks.verify(Problem("k", domain, "p", truth), response) == score


def test_the_domain_comes_from_extra_info_before_data_source():
    assert compute_score("openai/gsm8k", "abc", "abc", {"domain": "logic"}) == 1.0
    with pytest.raises(ConfigError, match="unknown domain 'openai/gsm8k'"):
        compute_score("openai/gsm8k", "1", "1", {"index": 0})
    with pytest.raises(ConfigError, match="Did you mean 'math'"):
        compute_score("mth", "1", "1")


def test_trl_reward_reads_the_columns_trl_passes():
    truth = [{"style": "rule", "ground_truth": g} for g in ("12", "12", "ab", "ab")]
    chat = [[{"role": "assistant", "content": c}] for c in ("12", "13", "ab", "AB")]
    prompts = [[{"role": "user", "content": "p"}]] * 4
    extra = {"trainer_state": None, "completion_ids": [[0]] * 4}
    got = correct(prompts, chat, truth, domain=["math", "math", "logic", "logic"], **extra)
    assert got == [1.0, 0.0, 1.0, 0.0]
    # plain-text completions; no domain column: extra_info.domain, else data_source
    plain = correct(
        ["p"] * 4,
        ["12", "12", "ab", "ab"],
        truth,
        data_source=["math", "x", "logic", "logic"],
        extra_info=[{}, {"domain": "math"}, None, {"index": 3}],
    )
    assert plain == [1.0, 1.0, 1.0, 1.0]


def test_the_domain_verifier_kind(tasks):
    v = build_verifier("domain", "verifiers.math", domain="math")
    assert (v("07", "7"), v("7.", "7")) == (1.0, 0.0)
    with pytest.raises(ConfigError, match="verifiers.x: missing required key 'domain'"):
        build_verifier("domain", "verifiers.x")
    with pytest.raises(ConfigError, match="verifiers.x: unknown domain 'mth'"):
        build_verifier({"kind": "domain", "domain": "mth"}, "verifiers.x")


def test_bad_exports_are_refused_before_writing(tasks, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"already holds keep\.txt; .*--force"):
        export_tasks(tasks, tmp_path / "a")
    p = Problem("nope:1", "nope", "1", "1")
    odd = TaskSet(("nope",), {"nope": [p]}, {"nope": []}, handlers={"nope": object()})
    with pytest.raises(ConfigError, match="unknown domain 'nope'"):
        export_tasks(odd, tmp_path / "b")
    with pytest.raises(ConfigError, match="domain 'math' has no held-out problems"):
        export_tasks(tasks, tmp_path / "c", eval_per_domain=0)
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
