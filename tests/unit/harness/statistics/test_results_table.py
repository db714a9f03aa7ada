"""harness/statistics/results_table.py: wide tables, strata, --scale and --domains, and refusals that
name the file, line and column."""

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.statistics.results_table import read_domains, read_table, slug

WIDE = """\
run_id,campaign,model,method,seed,steps,regime,math500,aime24,gpqa_diamond,notes
r1,c1,qwen,grpo,0,500,short,60.0,30.0,40.0,first try
r2,c1,qwen,dapo,0,500,short,62.5,,41.0,
r3,c1,llama,grpo,0,500,short,50.0,20.0,35.0,
r4,c1,llama,dapo,0,500,short,51.0,21.0,35.5,
"""


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_wide_table_is_detected_melted_and_split_by_columns(tmp_path):
    t = read_table(write(tmp_path, WIDE), by=("model",), scale=0.01)
    assert t.layout == "wide" and t.benchmarks == ["math500", "aime24", "gpqa_diamond"]
    assert t.notes == ["descriptive columns (not benchmarks): notes"]
    # strata sorted by their values; an empty cell is a missing score (dapo on aime24)
    assert [s.label for s in t.strata] == ["model=llama", "model=qwen"]
    qwen = t.strata[1].rows
    assert [(r.method, r.seed, r.benchmark) for r in qwen] == [
        ("grpo", "0", "math500"),
        ("grpo", "0", "aime24"),
        ("grpo", "0", "gpqa_diamond"),
        ("dapo", "0", "math500"),
        ("dapo", "0", "gpqa_diamond"),
    ]
    assert qwen[3].score == pytest.approx(0.625) and qwen[3].step is None


def test_without_by_the_same_method_and_seed_twice_names_the_lines_and_columns(tmp_path):
    with pytest.raises(ConfigError) as e:
        read_table(write(tmp_path, WIDE))
    assert str(e.value) == (
        f"{tmp_path / 't.csv'}: duplicate result method=grpo, seed=0, benchmark=math500 at "
        "lines 2 and 4 (run_id r1 and r3); the rows differ in model, notes: add the column "
        "that tells them apart to --by (a checkpoint column is called step)"
    )


def test_domains_group_and_select_benchmarks(tmp_path):
    yaml_map = write(tmp_path, "# groups\nmath: [math500, aime24]\n", "d.yaml")
    t = read_table(write(tmp_path, WIDE), by=("model",), domains=read_domains(yaml_map))
    assert t.benchmarks == ["math500", "aime24"]
    assert "numeric columns not in --domains, left out: gpqa_diamond" in t.notes
    assert {r.domain for s in t.strata for r in s.rows} == {"math"}
    # the other spellings of the same mapping
    flat = write(tmp_path, "math500: math\naime24: math\n", "e.yaml")
    as_csv = write(tmp_path, "benchmark,domain\nmath500,math\naime24,math\n", "d.csv")
    assert read_domains(yaml_map) == read_domains(flat) == read_domains(as_csv)


def test_long_tables_take_by_and_domains_too(tmp_path):
    text = "model,method,seed,benchmark,score\nq,a,0,x,1\nq,b,0,x,2\nl,a,0,x,3\nl,a,0,y,4\n"
    t = read_table(write(tmp_path, text), by=("model",), domains={"x": "d"})
    assert t.layout == "long" and [s.label for s in t.strata] == ["model=l", "model=q"]
    assert [(r.method, r.score, r.domain) for r in t.strata[0].rows] == [("a", 3.0, "d")]
    assert t.notes == ["benchmarks not in --domains, left out: y"]


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        # a score column without benchmark: a long table missing a column, not a wide one
        ("method,seed,score\nm,0,1\n", {}, r"missing column\(s\) benchmark; a long results"),
        ("model,seed,x\nq,0,1\n", {}, r"missing column\(s\) method; a results CSV is long"),
        ("method,seed,model\na,0,q\n", {}, r"no benchmark columns: a wide table has one"),
        (
            "method,seed,math500\na,0,61.0\nb,0,n/a\n",
            {},
            r"t\.csv:3: column 'math500' holds 'n/a', not a number, while its other cells",
        ),
        ("method,seed,m\na,0,1,7\n", {}, r"t\.csv:2: 4 fields for 3 columns"),
        ("method,seed,m,m\na,0,1,2\n", {}, r"column\(s\) m appear more than once"),
        ("method,seed,m\na,0,inf\n", {}, r"t\.csv:2: m is 'inf'; leave the cell empty"),
        ("method,seed,m\n,0,1\n", {}, r"t\.csv:2: empty 'method'"),
        (
            "modle,method,seed,m\nq,a,0,1\n",
            {"by": ("model",)},
            r"--by model: not a column.*'modle'",
        ),
        ("model,method,seed,m\nq,a,0,1\n", {"by": ("method",)}, r"--by method: method is part"),
        ("method,seed,m\na,0,1\n", {"domains": {"mm": "d"}}, r"--domains: mm not among.*'m'"),
        ("method,seed,m\na,0,1\n", {"scale": 0.0}, r"--scale 0\.0: must be a positive"),
        ("method,seed,m\n", {}, r"no result rows"),
    ],
)
def test_bad_tables_are_refused_naming_the_column(tmp_path, text, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        read_table(write(tmp_path, text), **kwargs)


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("d.yaml", "- math500\n", "expected a mapping"),
        ("d.yaml", "math: [a]\nsci: [a]\n", "a is in two domains, math and sci"),
        ("d.yaml", "math: {a: 1}\n", "math: expected a list of benchmarks or a domain name"),
        ("d.csv", "name,group\na,b\n", "a CSV needs columns benchmark, domain"),
    ],
)
def test_bad_domain_files_are_refused(tmp_path, name, text, match):
    with pytest.raises(ConfigError, match=match):
        read_domains(write(tmp_path, text, name))
    with pytest.raises(ConfigError, match="no such file"):
        read_domains(tmp_path / "none.yaml")


def test_a_checkpoint_column_makes_rows_per_step(tmp_path):
    text = "method,seed,step,m\na,0,0,0.1\na,0,100,0.5\n"
    rows = read_table(write(tmp_path, text)).rows
    assert [(r.step, r.score) for r in rows] == [(0, 0.1), (100, 0.5)]


def test_an_empty_by_cell_is_a_stratum_of_its_own(tmp_path):
    # most runs have no special regime: their empty cell is the value "no regime"
    p = tmp_path / "t.csv"
    p.write_text("regime,method,seed,m\n,a,0,1\nlong,a,0,2\n,b,0,3\n")
    table = read_table(p, by=("regime",))
    assert [s.key for s in table.strata] == [(("regime", ""),), (("regime", "long"),)]
    assert [s.label for s in table.strata] == ["regime=(empty)", "regime=long"]
    assert [slug(s) for s in table.strata] == ["no-regime", "long"]
    assert [[r.score for r in s.rows] for s in table.strata] == [[1.0, 3.0], [2.0]]
