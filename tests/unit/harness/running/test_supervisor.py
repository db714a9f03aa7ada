"""harness/running/supervisor.py and the progress it reads: steps counted from the runs' own
records (hosts.host.metrics_steps_done), the overall bar, and a real pool running the stand-in engine."""

import json

from dataflex_rl.harness.running.runner import execute, plan
from dataflex_rl.harness.running.supervisor import Progress
from dataflex_rl.hosts.host import metrics_steps_done as steps_done
from tests.unit.harness.running.test_runner import FAKE, experiment


def write_log(path, records, tail=""):
    # compact separators: a count of the text '"kind": "train"' finds nothing here
    lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    path.write_text(lines + tail)


def test_steps_done_is_the_newest_train_record_plus_one(tmp_path):
    assert steps_done(tmp_path) == 0  # no metrics.jsonl yet
    records = [{"kind": "eval", "step": 0}]
    records += [{"kind": "train", "step": s, "loss": 0.1} for s in range(7)]
    records += [{"kind": "eval", "step": 7}]
    # steps 0..6 trained, then an eval, then a line cut mid-write: 7 steps done
    write_log(tmp_path / "metrics.jsonl", records, tail='{"kind":"train","st')
    assert steps_done(tmp_path) == 7
    # a tail too short to hold a whole train record falls back to the whole file
    assert steps_done(tmp_path, tail_bytes=16) == 7


def test_steps_done_follows_a_log_cut_back_on_resume(tmp_path):
    # the step number counts, not the lines: records of steps 0-3 and 9 say 10 steps done
    write_log(tmp_path / "metrics.jsonl", [{"kind": "train", "step": s} for s in (0, 1, 2, 3, 9)])
    assert steps_done(tmp_path) == 10
    # the same log cut back to its checkpoint at step 3 when the run resumes
    write_log(tmp_path / "metrics.jsonl", [{"kind": "train", "step": s} for s in (0, 1, 2)])
    assert steps_done(tmp_path) == 3
    write_log(tmp_path / "metrics.jsonl", [{"kind": "eval", "step": 0}])
    assert steps_done(tmp_path) == 0


def test_progress_counts_finished_runs_whole_and_caps_each_running_one():
    shown = {"a": 3, "b": 12}  # b's records say more than its 10 steps: capped at 10
    bar = Progress(4, 1, 10, lambda job: shown[job], workers=2, show=False)
    bar.running = ["a", "b"]
    assert bar.count() == 1 * 10 + 3 + 10
    bar.refresh()  # no bar drawn: refreshing is a no-op, never an error


def test_a_real_pool_ends_with_the_bar_full(tmp_path, capsys):
    exp = experiment(strategies=["baseline", "difffilter"], seeds=[0])
    ex = execute(plan(exp, tmp_path, FAKE), workers=2, progress=True)
    assert [r["status"] for r in ex.results] == ["done", "done"]
    # 2 runs × 4 steps, every step read back from the stand-in's records
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "8/8" in last and "done=2" in last and "failed=0" in last
