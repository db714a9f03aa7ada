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


def test_the_domain_key_is_one_column_for_every_row(tmp_path):
    # null: 'domain' when the data has it, else 'data_source' (verl's convention); a set key,
    # dotted for a nested field, is read as it is
    plain = _write_jsonl(tmp_path / "p.jsonl", [_row("1+1=", "2", domain=None, source="gsm")])
    assert list(load_problems(plain)) == ["gsm"]
    rows = [
        _row("1+1=", "2", domain="math", source="gsm", extra_info={"dom": "x"}),
        _row("2+2=", "4", domain="logic", source="gsm", extra_info={"dom": "y"}),
    ]
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    assert {d: [p.prompt for p in ps] for d, ps in load_problems(path).items()} == {
        "math": ["1+1="],
        "logic": ["2+2="],
    }
    assert list(load_problems(path, "data_source")) == ["gsm"]
    assert list(load_problems(path, "extra_info.dom")) == ["x", "y"]


def test_a_row_without_the_domain_column_is_refused_not_read_from_data_source(tmp_path):
    """Was: the engine's tasks.domain_column fell back to data_source row by row, while verl
    and TRL refused a row without the column. One meaning now (issue 30): every row needs
    the column the data's domains come from, on every host."""
    rows = [
        _row("1+1=", "2", domain="math"),
        _row("2+2=", "4", domain=None, source="gsm"),
        _row("3+3=", "6", domain=None, source="gsm"),
    ]
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(ConfigError) as e:
        load_problems(path)
    assert str(e.value) == (
        f"dataset {str(path)!r}: tasks.domain_key: 2 of 3 rows have no 'domain' (first: "
        f"{path} row 1); every row needs the domain column"
    )
    # across files: one column for the data, the rows named by file
    a = _write_jsonl(tmp_path / "a.jsonl", [_row("1+1=", "2", domain="math")])
    b = _write_jsonl(tmp_path / "b.jsonl", [_row("2+2=", "4", domain=None, source="gsm")])
    with pytest.raises(ConfigError, match=rf"1 of 2 rows have no 'domain' \(first: {b} row 0\)"):
        load_problems([a, b])


def test_a_domain_key_that_is_not_a_column_is_refused_listing_the_columns(tmp_path):
    # a typo'd domain_key must not quietly fall back to data_source for every row
    path = _write_jsonl(tmp_path / "d.jsonl", [_row("1+1=", "2", source="gsm")])
    with pytest.raises(ConfigError) as e:
        load_problems(path, "topic")
    msg = str(e.value)
    assert "tasks.domain_key: 'topic' is not a column of the training set" in msg
    assert "(columns: 'data_source', 'prompt', 'ability', 'reward_model'" in msg
    assert "'reward_model.ground_truth'" in msg  # nested columns as dotted paths
    assert "set tasks.domain_key to the column that holds each prompt's domain" in msg


def test_the_held_out_data_takes_the_training_datas_domain_column(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", [_row("1+1=", "2", domain="math")])
    test = _write_jsonl(tmp_path / "test.jsonl", [_row("2+2=", "4", domain=None, source="math")])
    with pytest.raises(ConfigError) as e:
        load_dataset(train, eval_path=test)
    assert (
        f"dataset {str(test)!r}: tasks.domain_key: 'domain' is not a column of the held-out "
        "set (the training set's domains come from 'domain')"
    ) in str(e.value)
    assert load_dataset(train, "data_source", eval_path=test).eval["math"][0].prompt == "2+2="


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
    with pytest.raises(ConfigError, match="nope.jsonl.*no such file or directory"):
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
    with pytest.raises(ConfigError, match="verifiers.a: unknown verifier kind 'fuzzy'"):
        load_dataset(path, verifier="fuzzy")
    with pytest.raises(
        ConfigError, match=r"no verifier declared for domain\(s\) \['a', 'b', 'c'\]"
    ):
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
    assert p.extra["row"] == f"{path} row 0"
    assert ts.verify(p, "It is \\boxed{0.5}.") == 1.0
    assert ts.verify(p, "It is \\boxed{2}.") == 0.0


# ---------------------------------------------------------------- real datasets: formats, errors
THREE = {"math": "math", "logic": "exact", "science": {"kind": "numeric", "rel_tol": 1e-4}}


def _three_domain_rows(n=6):
    """verl rows of three domains: a math expression, a word answer, a number with units."""
    rows = []
    for i in range(n):
        rows.append(_row(f"What is {i}/4 as a fraction?", f"\\frac{{{i}}}{{4}}", domain="math"))
        rows.append(_row(f"Is {i} even? yes or no", "yes" if i % 2 == 0 else "no", domain="logic"))
        rows.append(_row(f"{i + 1} km in m?", f"{(i + 1) * 1000}", domain="science"))
    return rows


def _save_to_disk(rows, path, num_shards=1):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(path), num_shards=num_shards)
    return ds


def test_parquet_jsonl_and_save_to_disk_give_the_same_problems(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _three_domain_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    _write_jsonl(tmp_path / "d.jsonl", rows)
    _save_to_disk(rows, tmp_path / "saved", num_shards=2)
    sets = [
        load_dataset(tmp_path / name, verifier=THREE, eval_fraction=0.25, seed=3)
        for name in ("d.parquet", "d.jsonl", "saved")
    ]
    for ts in sets[1:]:
        assert ts.domains == sets[0].domains == ("math", "logic", "science")
        assert ts.train == sets[0].train and ts.eval == sets[0].eval
    ts = sets[0]
    sci = ts.train["science"][0]
    # numeric accepts another spelling of the number, exact normalizes case and a period
    assert ts.verify(sci, f"{float(sci.answer):.1f}") == 1.0 and ts.verify(sci, "1") == 0.0
    logic = ts.train["logic"][0]
    assert ts.verify(logic, logic.answer.upper() + ".") == 1.0


def test_save_to_disk_read_with_pyarrow_alone_equals_datasets(tmp_path, monkeypatch):
    from dataflex_rl.tasks import datasets as loader

    rows = _three_domain_rows()
    _save_to_disk(rows, tmp_path / "saved", num_shards=3)
    with_datasets = loader.read_rows(tmp_path / "saved")
    monkeypatch.setattr(loader, "available", lambda module: module != "datasets")
    assert loader.read_rows(tmp_path / "saved") == with_datasets == rows


def test_dataset_dict_train_and_test_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = _three_domain_rows()
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(rows[:12]),
            "test": datasets.Dataset.from_list(rows[12:]),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    ts = load_dataset(tmp_path / "dd", verifier=THREE)  # eval defaults to the test split
    assert sum(map(len, ts.train.values())) == 12 and sum(map(len, ts.eval.values())) == 6
    same = load_dataset(tmp_path / "dd", eval_path=tmp_path / "dd", verifier=THREE)
    assert same.eval == ts.eval and same.train == ts.train
    datasets.DatasetDict({"test": dd["test"]}).save_to_disk(str(tmp_path / "t"))
    with pytest.raises(ConfigError, match="no split 'train'; splits there: test"):
        load_dataset(tmp_path / "t")


def test_a_list_of_files_is_read_in_order(tmp_path):
    rows = _three_domain_rows()
    a = _write_jsonl(tmp_path / "a.jsonl", rows[:9])
    b = _write_jsonl(tmp_path / "b.jsonl", rows[9:])
    both = load_problems([a, b])
    assert both == load_problems(_write_jsonl(tmp_path / "ab.jsonl", rows))
    assert both["math"][-1].extra["row"] == f"{b} row 6"


def test_empty_unreadable_and_missing_paths_are_one_line_errors(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    (tmp_path / "plain_dir").mkdir()
    cases = {
        "empty.jsonl": "the file is empty",
        "blank.jsonl": "no rows",
        "bad.parquet": "not a readable parquet file",
        "nope.parquet": "no such file or directory",
        "plain_dir": "not one written by datasets' save_to_disk",
    }
    for name, why in cases.items():
        with pytest.raises(ConfigError) as e:
            load_dataset(tmp_path / name, verifier="exact")
        msg = str(e.value)
        assert str(tmp_path / name) in msg and why in msg and "\n" not in msg, msg


@pytest.mark.parametrize(
    "column, option, what",
    [
        ("prompt", "prompt_column", "prompt"),
        ("reward_model.ground_truth", "answer_column", "ground-truth"),
    ],
)
def test_a_missing_column_lists_the_present_ones(tmp_path, column, option, what):
    path = _write_jsonl(tmp_path / "r.jsonl", [_row("1+1=", "2", source=None)])
    with pytest.raises(ConfigError) as e:
        load_dataset(path, **{option: "nope"})
    msg = str(e.value)
    assert "r.jsonl" in msg and "row 0" in msg and "'nope'" in msg and what in msg
    assert "columns present: data_source, prompt, ability, reward_model" in msg
    assert "reward_model.ground_truth" in msg  # nested columns are listed as dotted paths


def test_every_domain_needs_a_declared_verifier(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _three_domain_rows())
    with pytest.raises(ConfigError) as e:
        load_dataset(path, verifier={"math": "math", "logic": "exact"})
    msg = str(e.value)
    assert "no verifier declared for domain(s) ['science']" in msg
    assert "domains found: ['math', 'logic', 'science']" in msg
    assert "kinds: domain, exact, math, numeric" in msg
    with pytest.raises(ConfigError, match=r"\['sceince'\] are not in .* Did you mean 'science'"):
        load_dataset(path, verifier={**THREE, "sceince": "exact"})


def test_a_ground_truth_its_verifier_cannot_check_is_named(tmp_path):
    rows = _three_domain_rows(2) + [_row("Speed of light?", "fast", domain="science")]
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(ConfigError) as e:
        load_dataset(path, verifier=THREE)
    assert str(e.value).startswith(f"{path} row 6: ground truth 'fast' is not a number")
    assert "domain 'science' is verified by" in str(e.value)


def test_content_hash_follows_the_bytes(tmp_path):
    from dataflex_rl.tasks.datasets import content_sha256

    rows = _three_domain_rows()
    a = _write_jsonl(tmp_path / "a.jsonl", rows)
    first = content_sha256(a)
    assert content_sha256(_write_jsonl(tmp_path / "b.jsonl", rows)) == first
    _write_jsonl(a, rows[:-1])
    assert content_sha256(a) != first
    _save_to_disk(rows, tmp_path / "s")
    h = content_sha256(tmp_path / "s")
    (tmp_path / "s" / "extra.txt").write_text("x")
    assert content_sha256(tmp_path / "s") != h
