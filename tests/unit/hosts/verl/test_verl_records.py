"""Reading a verl run's results from verl's own file logger (hand-written logs, verl 0.9.1's
key names), and the verl controls' settings."""

import json

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.harness.running.controls import control_overrides
from dataflex_rl.hosts.verl.host import VerlHost

HOST = VerlHost()
CONTROLS, has_checkpoint = VerlHost.controls, HOST.has_checkpoint
read_records, steps_done = HOST.read_records, HOST.steps_done


def line(step, **data):
    return json.dumps({"step": step, "data": data})


def write(run, attempt, lines, cut=""):
    d = run / "verl_metrics"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"attempt-{attempt}.jsonl").write_text("\n".join(lines) + "\n" + cut)


VAL0 = {  # step 0: verl's validation before training
    "val-core/math/acc/mean@1": 0.75,
    "val-aux/math/reward/mean@1": 0.75,
    "val-core/openai/gsm8k/acc/mean@1": 0.5,  # a data source with a slash
    "val-aux/num_turns/mean": 2.0,
}


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "runs" / "baseline" / "seed0"
    write(
        run,
        1,
        [
            line(0, **VAL0),
            line(
                1,
                **{
                    "training/global_step": 1,
                    "actor/pg_loss": 0.1,
                    "dataflex/mix/domain/math/target": 0.6,
                    "dataflex/mix/domain/math/actual": 0.5,
                },
            ),
            line(
                2,
                **{
                    "training/global_step": 2,
                    "val-core/math/acc/mean@1": 0.8,
                    "val-core/openai/gsm8k/acc/mean@1": 0.55,
                },
            ),
        ],
        cut='{"step": 3, "data": {"training/glo',  # killed mid-write
    )
    # resumed from the step-2 checkpoint: validates at step 2 again, then steps 3 and 4
    write(
        run,
        2,
        [
            line(2, **{"val-core/math/acc/mean@1": 0.8, "val-core/openai/gsm8k/acc/mean@1": 0.6}),
            line(3, **{"training/global_step": 3}),
            line(
                4,
                **{
                    "training/global_step": 4,
                    "val-core/math/acc/mean@1": 1.0,
                    "val-core/openai/gsm8k/acc/mean@1": 0.25,
                    "dataflex/mix/domain/math/target": 0.7,
                    "dataflex/mix/domain/math/actual": 0.75,
                },
            ),
        ],
    )
    return run


def test_every_validated_step_per_data_source_the_later_attempt_winning(run):
    evals, props = read_records(run, {"eval_metric": "greedy"}, mixes=False)
    assert evals == [
        {"step": 0, "math/greedy": 0.75, "openai_gsm8k/greedy": 0.5},
        {"step": 2, "math/greedy": 0.8, "openai_gsm8k/greedy": 0.6},  # attempt 2's
        {"step": 4, "math/greedy": 1.0, "openai_gsm8k/greedy": 0.25},
    ]
    assert props == []


def test_proportions_of_a_mixer_at_the_strategys_step(run):
    _, props = read_records(run, {}, mixes=True)
    assert props == [
        {"step": 0, "domain": "math", "target": 0.6, "actual": 0.5},
        {"step": 3, "domain": "math", "target": 0.7, "actual": 0.75},
    ]


def test_sampled_validation_reads_mean_at_n_only(tmp_path):
    write(
        tmp_path,
        1,
        [
            line(
                0,
                **{
                    "val-core/logic/reward/mean@4": 0.375,  # no acc: the reward
                    "val-core/logic/reward/maj@4/mean": 0.5,
                    "val-core/logic/reward/best@4/mean": 1.0,
                    "val-aux/logic/reward/mean@2": 0.25,
                },
            ),
        ],
    )
    assert read_records(tmp_path, {"eval_metric": "sampled"}, mixes=False)[0] == [
        {"step": 0, "logic/sampled": 0.375}
    ]


def test_progress_is_the_newest_attempts_last_training_step(run, tmp_path):
    assert steps_done(run) == 4
    assert steps_done(tmp_path / "nothing") == 0
    fresh = tmp_path / "resumed"
    write(fresh, 1, [line(0, **VAL0), line(1, **{"training/global_step": 1})])
    write(fresh, 2, [])  # started again, nothing logged yet: the checkpoint's step
    (fresh / "ckpt").mkdir()
    (fresh / "ckpt" / "latest_checkpointed_iteration.txt").write_text("1")
    assert steps_done(fresh) == 1 and has_checkpoint(fresh) and not has_checkpoint(run)


SETTINGS = {"model": "/m", "train_files": "/t", "val_files": "/v", "lr": 2e-6, "sampling_stream": 3}


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("aa", {}, {"sampling_stream": 4}),
        ("aa", {"sampling_stream": 0}, {"sampling_stream": 0}),
        ("no_update", {}, {"lr": 0.0}),
        ("half_lr", {}, {"lr": 1e-6}),
        ("drop_half", {"fraction": 0.5}, {}),  # a selector in the strategy, on every host
    ],
)
def test_controls_map_to_verl_settings(name, params, expected):
    assert control_overrides(name, params, CONTROLS, SETTINGS, "controls") == expected


def test_an_aa_stream_equal_to_the_experiments_is_refused():
    with pytest.raises(ConfigError, match=r"controls.sampling_stream: must differ.*verl\.sampling"):
        control_overrides("aa", {"sampling_stream": 3}, CONTROLS, SETTINGS, "controls")


def test_unset_stream_and_lr_are_verls_defaults():
    # verl.lr unset: VerlSettings' 1e-6, halved; sampling_stream unset: 0, so aa takes 1
    bare = {"model": "/m", "train_files": "/t", "val_files": "/v"}
    assert control_overrides("half_lr", {}, CONTROLS, bare, "c") == {"lr": 5e-7}
    assert control_overrides("aa", {}, CONTROLS, bare, "c") == {"sampling_stream": 1}


def test_held_out_subset_keeps_the_first_n_of_each_data_source_in_file_order(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from dataflex_rl.hosts.verl.run import held_out_subset

    # two files, read one after the other as verl concatenates them:
    #   a.parquet: math0 logic0 math1 math2      b.parquet: logic1 sci0 logic2 math3
    pq.write_table(
        pa.table({"data_source": ["math", "logic", "math", "math"], "q": ["m0", "l0", "m1", "m2"]}),
        tmp_path / "a.parquet",
    )
    pq.write_table(
        pa.table({"data_source": ["logic", "sci", "logic", "math"], "q": ["l1", "s0", "l2", "m3"]}),
        tmp_path / "b.parquet",
    )
    files = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    out = held_out_subset(files, 2, tmp_path / "run" / "held_out.parquet")
    # 2 per source: math0 math1 (math2, math3 left out), logic0 logic1 (logic2 out), sci0
    assert pq.read_table(out).column("q").to_pylist() == ["m0", "l0", "m1", "l1", "s0"]
    one = held_out_subset(files[0], 1, tmp_path / "one.parquet")
    assert pq.read_table(one).column("q").to_pylist() == ["m0", "l0"]
    everything = held_out_subset(files, 10, tmp_path / "all.parquet")
    assert pq.read_table(everything).num_rows == 8
    pq.write_table(pa.table({"q": ["x"]}), tmp_path / "bare.parquet")
    with pytest.raises(ConfigError, match=r"verl\.val_files: .*bare\.parquet has no data_source"):
        held_out_subset(str(tmp_path / "bare.parquet"), 1, tmp_path / "x.parquet")
