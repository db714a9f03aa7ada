"""harness/statistics/tracked.py: tracker runs -> result rows (selection, method/seed fields, metric
patterns, steps) and its one-line errors, on hand-built runs (the readers of real stores are
tested in tests/unit/tracking/test_stores.py)."""

from __future__ import annotations

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics import tracked
from dataflex_rl.harness.statistics.results import Row
from dataflex_rl.harness.statistics.tracked import (
    TrackerQuery,
    benchmark_namer,
    field_reader,
    read_tracker,
)
from dataflex_rl.tracking.runs import FAILED, FINISHED, TrackedRun


def run(name, method="grpo", seed="0", group="g", metrics=None, status=FINISHED, **fields):
    """A W&B-like run as ``tracking:`` writes it: tags strategy and seed."""
    return TrackedRun(
        "wandb",
        id=f"id-{name}",
        name=name,
        experiment="proj",
        group=group,
        status=status,
        labels=(f"strategy:{method}", f"seed:{seed}", "sweep"),
        fields={"strategy": method, "seed": seed, **fields},
        metrics=metrics if metrics is not None else {"eval/math/greedy": {0: 0.25, 2: 0.5}},
    )


@pytest.fixture
def store(monkeypatch):
    """``read_tracker`` reads the given runs (``store(runs)``), whatever the source."""

    def use(runs):
        monkeypatch.setattr(tracked, "read_runs", lambda backend, location, **kw: list(runs))
        monkeypatch.setattr(tracked, "require_reader", lambda *a: None)

    return use


def test_a_glob_names_the_benchmark_by_what_its_wildcards_matched():
    name = benchmark_namer("eval/*/greedy", ("eval/mean/*",))
    assert name("eval/math/greedy") == "math"
    assert name("eval/openai_gsm8k/greedy") == "openai_gsm8k"
    assert name("eval/mean/greedy") is None  # excluded
    assert name("eval/math/sampled") is None and name("train/math/reward") is None
    # from the first to the last wildcard (a set counts), slashes included
    assert benchmark_namer("val-core/*/reward/mean@[0-9]")(
        "val-core/openai/gsm8k/reward/mean@1"
    ) == ("openai/gsm8k/reward/mean@1")
    assert benchmark_namer("val/*/acc")("val/a/b/acc") == "a/b"
    assert benchmark_namer("accuracy")("accuracy") == "accuracy"  # no wildcard: the key


def test_a_regex_names_the_benchmark_by_its_group():
    assert benchmark_namer("re:val/(?P<benchmark>[^/]+)/acc@\\d+")("val/aime/acc@8") == "aime"
    assert benchmark_namer("re:test_(.+)")("test_gpqa") == "gpqa"
    assert benchmark_namer("re:test_.+")("test_gpqa") == "test_gpqa"
    assert benchmark_namer("re:test_.+")("xtest_gpqa") is None  # the whole key must match
    with pytest.raises(ConfigError, match=r"--metrics 're:\(': not a regular expression"):
        benchmark_namer("re:(")


def test_fields_are_read_whole_or_through_a_regex_and_a_missing_one_names_the_run():
    r = run("dapo-seed3", method="dapo", lr="0.1")
    assert field_reader("strategy", "--method-field")(r) == "dapo"
    assert field_reader("name~^(.+)-seed", "--method-field")(r) == "dapo"
    assert field_reader("name~seed(\\d+)$", "--seed-field")(r) == "3"
    assert field_reader("group", "--method-field")(r) == "g"  # the run's own attributes
    with pytest.raises(ConfigError) as e:
        field_reader("method", "--method-field")(r)
    assert str(e.value) == (
        "wandb run 'dapo-seed3' (id id-dapo-seed3): no field 'method' (--method-field); "
        "its fields: lr, seed, strategy"
    )
    with pytest.raises(ConfigError, match=r"name 'dapo-seed3' does not match --seed-field"):
        field_reader("name~s(\\d+)x", "--seed-field")(r)


def test_rows_keep_every_step_or_the_one_asked_for(store):
    store(
        [
            run("b0", "baseline", "0", metrics={"eval/math/greedy": {0: 0.25, 2: 0.5}}),
            run("b1", "baseline", "1.0", metrics={"eval/math/greedy": {0: 0.25, 2: 0.75}}),
        ]
    )
    got = read_tracker(TrackerQuery("wandb:x"))
    assert got.rows == [
        Row("baseline", "0", "math", 0.25, "", 0),
        Row("baseline", "0", "math", 0.5, "", 2),
        Row("baseline", "1", "math", 0.25, "", 0),  # seed 1.0 is seed 1
        Row("baseline", "1", "math", 0.75, "", 2),
    ]
    assert "results: 2 runs of `wandb:x`" in got.setup[0]
    at0 = read_tracker(TrackerQuery("wandb:x", step=0))
    assert [(r.seed, r.step, r.score) for r in at0.rows] == [("0", 0, 0.25), ("1", 0, 0.25)]
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x", step=1))
    assert str(e.value) == (
        "wandb run 'b0' (id id-b0): no value of 'eval/math/greedy' at --step 1 (its steps: 0, 2)"
    )


def test_group_and_tags_select_runs_and_failed_or_empty_runs_are_skipped_and_said(store):
    store(
        [
            run("a", "grpo", "0", group="g1"),
            run("b", "dapo", "0", group="g1", lr="0.1"),
            run("c", "dapo", "0", group="g2"),
            run("d", "dapo", "1", group="g1", status=FAILED),
            run("report", group="g1", metrics={"report/average/dapo/delta": {2: 0.1}}),
        ]
    )
    got = read_tracker(TrackerQuery("wandb:x", group="g1"))
    assert [r.name for r in got.runs] == ["a", "b"]
    assert got.setup[1:] == [
        "skipped 1 run(s) (the tracker marks them failed): d",
        "skipped 1 run(s) (no matching metric): report",
    ]
    one = read_tracker(TrackerQuery("wandb:x", tags=("sweep", "lr=0.1")))
    assert [r.name for r in one.runs] == ["b"]
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x", group="g3"))
    assert str(e.value).startswith(
        "wandb:x: none of its 5 runs matched --group g3; groups: g1, g2; tags: seed:0, seed:1,"
    )


def test_two_runs_of_one_method_seed_and_benchmark_are_refused_naming_both(store):
    store([run("a", "grpo", "0"), run("again", "grpo", "0")])
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x"))
    assert str(e.value).startswith(
        "wandb run 'a' (id id-a) and wandb run 'again' (id id-again) are both method 'grpo' "
        "seed 0 on benchmark 'math'"
    )
    # different benchmarks of one method and seed (an evaluation run per benchmark) are fine
    store(
        [
            run("m", metrics={"eval/math/greedy": {5: 0.5}}),
            run("l", metrics={"eval/logic/greedy": {5: 0.25}}),
        ]
    )
    assert [r.benchmark for r in read_tracker(TrackerQuery("wandb:x")).rows] == ["math", "logic"]


def test_no_metric_matching_and_a_bad_seed_are_one_line_errors(store):
    store([run("a", metrics={"loss": {0: 1.0}})])
    with pytest.raises(
        ConfigError, match=r"no selected run has a finite metric matching --metrics"
    ):
        read_tracker(TrackerQuery("wandb:x"))
    store([run("a", seed="0.5")])
    with pytest.raises(
        ConfigError, match=r"wandb run 'a' \(id id-a\): seed '0.5' is not an integer"
    ):
        read_tracker(TrackerQuery("wandb:x"))


def test_the_default_benchmarks_are_the_accuracy_the_runs_were_compared_on(store):
    both = {"eval/math/greedy": {2: 0.5}, "eval/math/sampled": {2: 0.25}}
    # compare tags its runs with the experiment's metric: greedy here, though sampled was logged
    store([run("t", metrics=both, metric="greedy")])
    assert [r.score for r in read_tracker(TrackerQuery("wandb:x")).rows] == [0.5]
    # untagged runs: the engine's decision metric, sampled, where logged ...
    store([run("s", metrics=both)])
    got = read_tracker(TrackerQuery("wandb:x"))
    assert [r.score for r in got.rows] == [0.25]
    assert "benchmarks = metrics `eval/*/sampled`" in got.setup[0]
    # ... else greedy
    store([run("g", metrics={"eval/math/greedy": {2: 0.5}})])
    assert [r.score for r in read_tracker(TrackerQuery("wandb:x")).rows] == [0.5]
    # an explicit pattern wins over the tag
    store([run("t", metrics=both, metric="greedy")])
    q = TrackerQuery("wandb:x", metrics="eval/*/sampled")
    assert [r.score for r in read_tracker(q).rows] == [0.25]


def test_runs_tagged_with_different_metrics_are_refused(store):
    both = {"eval/math/greedy": {2: 0.5}, "eval/math/sampled": {2: 0.25}}
    store(
        [
            run("a", seed="0", metrics=both, metric="greedy"),
            run("b", seed="1", metrics=both, metric="sampled"),
        ]
    )
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x"))
    assert str(e.value) == (
        "wandb:x: the selected runs are compared on different metrics (greedy, sampled); "
        "choose one with --metrics 'eval/*/<metric>' or narrow the runs"
    )


def test_by_fields_key_each_row_a_missing_or_empty_value_is_the_empty_stratum(store):
    from dataflex_rl.harness.statistics.results_table import slug, table_of_rows

    one = {"eval/math/greedy": {5: 0.5}}
    store(
        [
            run("q-long", "grpo", "0", metrics=one, model="qwen", regime="long"),
            run("q-none", "grpo", "0", metrics=one, model="qwen"),  # no regime field
            run("q-empty", "dapo", "0", metrics=one, model="qwen", regime=""),
            run("l-none", "grpo", "0", metrics=one, model="llama"),
        ]
    )
    got = read_tracker(TrackerQuery("wandb:x", by=("model", "regime")))
    # grpo seed 0 on math three times, in three strata: no duplicate
    assert got.keys == [
        (("model", "qwen"), ("regime", "long")),
        (("model", "qwen"), ("regime", "")),
        (("model", "qwen"), ("regime", "")),
        (("model", "llama"), ("regime", "")),
    ]
    assert "strata by field `model`, field `regime`; " in got.setup[0]
    table = table_of_rows(got.rows, "wandb:x", by=("model", "regime"), keys=got.keys)
    assert [(s.label, slug(s), s.methods) for s in table.strata] == [
        ("model=llama, regime=(empty)", "llama_no-regime", ["grpo"]),
        ("model=qwen, regime=(empty)", "qwen_no-regime", ["grpo", "dapo"]),
        ("model=qwen, regime=long", "qwen_long", ["grpo"]),
    ]
    assert table.path == "wandb:x" and table.by == ("model", "regime")
    # the run's own attributes are fields too: no group is the (empty) stratum
    store([run("a", "grpo", "0", metrics=one), run("b", "grpo", "0", metrics=one, group=None)])
    by_group = read_tracker(TrackerQuery("wandb:x", by=("group",)))
    assert by_group.keys == [(("group", "g"),), (("group", ""),)]


def test_two_runs_of_one_stratum_are_refused_naming_both_and_the_stratum(store):
    one = {"eval/math/greedy": {5: 0.5}}
    # no regime and an empty regime are the same stratum, as two empty cells are
    store(
        [
            run("a", "grpo", "0", metrics=one, model="qwen"),
            run("b", "grpo", "0", metrics=one, model="qwen", regime=""),
        ]
    )
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x", by=("model", "regime")))
    assert str(e.value) == (
        "wandb run 'a' (id id-a) and wandb run 'b' (id id-b) are both method 'grpo' seed 0 on "
        "benchmark 'math' in stratum model=qwen, regime=(empty); narrow the runs "
        "(--experiment, --group, --tag), check --method-field / --seed-field, or add the field "
        "that tells them apart to --by"
    )


def test_a_by_field_no_run_has_or_the_method_field_is_refused(store):
    store([run("a", "grpo", "0", regime="long"), run("b", "dapo", "0", status=FAILED, mdl="q")])
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x", by=("regime", "regim")))
    assert str(e.value) == (
        "--by regim: none of the 1 runs used has this field. Did you mean 'regime'? Their "
        "fields: regime, seed, strategy, name, id, group, experiment"
    )
    # a field only a skipped (failed) run has is as good as none
    with pytest.raises(ConfigError, match=r"^--by mdl: none of the 1 runs used has this field"):
        read_tracker(TrackerQuery("wandb:x", by=("mdl",)))
    with pytest.raises(ConfigError) as e:
        read_tracker(TrackerQuery("wandb:x", by=("strategy",)))
    assert str(e.value) == (
        "--by strategy: the field --method-field reads (strategy), part of every comparison; "
        "--by takes the fields that tell comparisons apart (e.g. model, regime)"
    )
    q = TrackerQuery("wandb:x", seed_field="name~s(\\d+)$", by=("regime", "name"))
    with pytest.raises(ConfigError, match=r"^--by name: the field --seed-field reads"):
        read_tracker(q)
