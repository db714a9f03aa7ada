"""Loading verl-schema JSONL / JSON / parquet files as task pools."""

from __future__ import annotations

import json

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks import build_taskset, load_dataset, load_problems, save_dataset
from dataflex_rl.tasks.datasets import LoadedDomain, problem_key, read_rows


def _row(prompt, truth, domain="math", source="src/a", **extra):
    row = {
        "data_source": source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": 0},
    }
    if domain is not None:
        row["domain"] = domain
    row.update(extra)
    return row


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_round_trip_of_generated_tasks(tmp_path):
    ts = build_taskset(train_size=30, eval_size=10, seed=4)
    save_dataset([p for d in ts.domains for p in ts.train[d]], tmp_path / "train.jsonl")
    save_dataset([p for d in ts.domains for p in ts.eval[d]], tmp_path / "test.jsonl", "test")
    back = load_dataset(tmp_path / "train.jsonl", eval_path=tmp_path / "test.jsonl")
    assert back.domains == ts.domains
    for d in ts.domains:
        assert back.train[d] == ts.train[d] and back.eval[d] == ts.eval[d]
        p = back.eval[d][0]
        assert back.verify(p, p.answer) == 1.0 and back.verify(p, p.answer + "9") == 0.0
        assert p.extra["messages"] == [{"role": "user", "content": p.prompt}]


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    ts = build_taskset(("math", "logic"), train_size=20, eval_size=5)
    problems = ts.train["math"] + ts.train["logic"]
    save_dataset(problems, tmp_path / "t.parquet")
    back = load_problems(tmp_path / "t.parquet")
    assert back["math"] == ts.train["math"] and back["logic"] == ts.train["logic"]
    assert back["math"][0].extra["extra_info"]["key"] == ts.train["math"][0].key


def test_domain_column_falls_back_to_data_source(tmp_path):
    rows = [
        _row("1+1=", "2", domain=None, source="gsm"),
        _row("2+2=", "4", domain="math"),
        _row("3+3=", "6", domain=None, source="gsm", extra_info={"dom": "x"}),
    ]
    pools = load_problems(_write_jsonl(tmp_path / "d.jsonl", rows))
    assert {d: [p.prompt for p in ps] for d, ps in pools.items()} == {
        "gsm": ["1+1=", "3+3="],
        "math": ["2+2="],
    }
    nested = load_problems(tmp_path / "d.jsonl", domain_column="extra_info.dom")
    assert [p.prompt for p in nested["x"]] == ["3+3="]


def test_chat_prompt_list_truth_and_duplicates(tmp_path):
    rows = [
        {
            "data_source": "s",
            "prompt": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Half of 1?"},
            ],
            "reward_model": {"ground_truth": ["0.5", "1/2"]},
        },
        {"data_source": "s", "prompt": "plain text prompt", "reward_model": {"ground_truth": 7}},
        {"data_source": "s", "prompt": "plain text prompt", "reward_model": {"ground_truth": 8}},
    ]
    ts = load_dataset(_write_jsonl(tmp_path / "c.jsonl", rows))
    a, b = ts.train["s"]
    assert a.prompt == "Be brief.\n\nHalf of 1?" and a.answer == "0.5"
    assert a.extra["answers"] == ["0.5", "1/2"] and len(a.extra["messages"]) == 2
    assert ts.verify(a, "1/2") == 1.0 and ts.verify(a, "0.5") == 1.0 and ts.verify(a, "2") == 0
    assert b.answer == "7" and len(ts.train["s"]) == 2  # the repeated prompt keeps its first row


def test_long_prompts_get_hashed_keys():
    assert problem_key("m", "1+1=") == "m:1+1="
    long = "x" * 100
    assert problem_key("m", long).startswith("m:#") and len(problem_key("m", long)) == 19
    assert problem_key("m", long) == problem_key("m", long) != problem_key("m", long + "y")


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(ConfigError, match="nope.jsonl.*no such file"):
        load_dataset(tmp_path / "nope.jsonl")
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="unknown format '.csv'"):
        read_rows(tmp_path / "d.csv")
    (tmp_path / "bad.jsonl").write_text("{not json}\n")
    with pytest.raises(ConfigError, match="bad.jsonl.*invalid JSON"):
        read_rows(tmp_path / "bad.jsonl")
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(ConfigError, match="list of rows"):
        read_rows(tmp_path / "obj.json")


@pytest.mark.parametrize(
    "drop,column",
    [
        ("domain", "'domain'"),
        ("prompt", "'prompt'"),
        ("reward_model", "'reward_model.ground_truth'"),
    ],
)
def test_missing_columns_name_path_and_column(tmp_path, drop, column):
    row = _row("1+1=", "2")
    del row[drop]
    if drop == "domain":
        del row["data_source"]
    path = _write_jsonl(tmp_path / "rows.jsonl", [_row("2+2=", "4"), row])
    with pytest.raises(ConfigError) as e:
        load_dataset(path)
    assert "rows.jsonl" in str(e.value) and column in str(e.value) and "row 1" in str(e.value)


def test_custom_domain_column_missing_is_named(tmp_path):
    row = _row("1+1=", "2")
    del row["data_source"]
    path = _write_jsonl(tmp_path / "r.jsonl", [row])
    with pytest.raises(ConfigError, match="r.jsonl.*'task_family'"):
        load_problems(path, domain_column="task_family")


def test_bad_prompt_type(tmp_path):
    row = _row("x", "1")
    row["prompt"] = [{"role": "user"}]
    path = _write_jsonl(tmp_path / "p.jsonl", [row])
    with pytest.raises(ConfigError, match="p.jsonl.*chat messages"):
        load_problems(path)


def test_eval_fraction_split_is_disjoint_and_deterministic(tmp_path):
    rows = [_row(f"{i}+1=", str(i + 1), domain="a" if i % 2 else "b") for i in range(100)]
    path = _write_jsonl(tmp_path / "s.jsonl", rows)
    a = load_dataset(path, eval_fraction=0.2, seed=1)
    b = load_dataset(path, eval_fraction=0.2, seed=1)
    c = load_dataset(path, eval_fraction=0.2, seed=2)
    assert a.eval == b.eval and a.eval != c.eval
    for d in ("a", "b"):
        assert len(a.eval[d]) == 10 and len(a.train[d]) == 40
        assert not {p.prompt for p in a.eval[d]} & {p.prompt for p in a.train[d]}
    with pytest.raises(ConfigError, match="eval_fraction"):
        load_dataset(path, eval_fraction=1.0)


def test_eval_path_prompts_are_removed_from_training(tmp_path):
    train = _write_jsonl(tmp_path / "tr.jsonl", [_row("1+1=", "2"), _row("2+2=", "4")])
    test = _write_jsonl(tmp_path / "te.jsonl", [_row("2+2=", "4")])
    ts = load_dataset(train, eval_path=test)
    assert [p.prompt for p in ts.train["math"]] == ["1+1="]
    assert [p.prompt for p in ts.eval["math"]] == ["2+2="]


def test_domains_filter_limit_and_verifier_choice(tmp_path):
    rows = [_row(f"{i}+0=", str(i), domain=d) for i in range(5) for d in ("a", "b", "c")]
    path = _write_jsonl(tmp_path / "f.jsonl", rows)
    ts = load_dataset(path, domains=["c", "a"], limit=3)
    assert ts.domains == ("c", "a") and len(ts.train["a"]) == 3
    with pytest.raises(ConfigError, match=r"\['z'\] are not in"):
        load_dataset(path, domains=["z"])
    with pytest.raises(ConfigError, match="unknown 'fuzzy'"):
        load_dataset(path, verifier="fuzzy")
    with pytest.raises(ConfigError, match="verifier: unknown domains"):
        load_dataset(path, verifier={"q": "exact"})
    custom = load_dataset(path, verifier=f"{__name__}:lenient")
    assert isinstance(custom.handler("a"), LoadedDomain)
    p = custom.train["a"][2]
    assert [custom.verify(p, r) for r in ("2", "x2", "3")] == [1.0, 0.0, 0.0]  # 0.5 -> 0
    with pytest.raises(ConfigError, match="not callable"):
        load_dataset(path, verifier="json:__doc__")


def lenient(response, truth):
    """A verifier with partial credit (substring match scores 0.5)."""
    return 1.0 if response == truth else (0.5 if truth in (response or "") else 0.0)


def test_loaded_domain_cannot_generate():
    with pytest.raises(ConfigError, match="cannot generate"):
        LoadedDomain("x").generate(3, 0)


def test_math_verifier_on_loaded_domain(tmp_path):
    pytest.importorskip("math_verify")
    path = _write_jsonl(tmp_path / "m.jsonl", [_row("What is half of 1?", "\\frac{1}{2}")])
    ts = load_dataset(path, verifier={"math": "math"})
    p = ts.train["math"][0]
    assert ts.verify(p, "It is \\boxed{0.5}.") == 1.0
    assert ts.verify(p, "It is \\boxed{2}.") == 0.0
