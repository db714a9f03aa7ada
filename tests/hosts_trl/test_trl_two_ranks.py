"""Two processes (torchrun, CPU, gloo) decide once on the gathered batch and agree.

Each rank runs `tests/hosts_trl/trl_ranks_run.py` (every mechanism and refill, token-level weights,
``loss_type=grpo``, 2 steps) and writes what it saw; here the two views are compared: the
same N, rewards, intake draws, keep masks, weights (per response and ar's per token) and
proportions on both ranks, slices that tile the N rows, and each rank's masks, per-token
weights, ``num_items_in_batch`` and advantage scale following its own slice of the one decision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


def torchrun(script: str, out: Path, *args: str) -> None:
    """Both ranks of ``script`` under ``torchrun --standalone --nproc_per_node 2`` (CPU, gloo).

    Each rank ends with ``tiny.end_rank`` (barrier, flush, ``os._exit(0)``) once its file is
    written, so exit status 0 means both ranks finished their own work; a teardown abort
    after it (docs/hosts/trl.md#multi-process) cannot fail the run."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    torchrun = Path(sys.executable).with_name("torchrun")
    path = ROOT / "tests" / "hosts_trl" / script
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(path), str(out), *args]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    torchrun("trl_ranks_run.py", out)
    return [json.loads((out / f"rank{p}.json").read_text()) for p in (0, 1)]


def test_both_ranks_saw_two_generations(views):
    assert [v["rank"] for v in views] == [0, 1] and {v["world"] for v in views} == {2}
    assert [len(v["views"]) for v in views] == [2, 2]
    assert sum(v["refill_rounds"] for v in views[0]["views"]) > 0  # refills ran


GLOBAL = (
    "step",
    "N",
    "lengths",
    "rewards",
    "prompt_keys",
    "keep",
    "weights",
    "token_weights",
    "proportions",
)


def test_ranks_decide_the_same_on_the_gathered_batch(views):
    for a, b in zip(views[0]["views"], views[1]["views"]):
        for key in GLOBAL:
            assert a[key] == b[key], key
        assert a["N"] == 16 and len(a["prompt_keys"]) == 16
        assert a["num_items_in_batch"] == b["num_items_in_batch"]
        assert a["advantage_scale"] == b["advantage_scale"]
        # refill: the same rounds on both ranks, and the batch decided holds its kept groups
        assert a["refill_rounds"] == b["refill_rounds"]
        assert a["refill_groups_kept"] == b["refill_groups_kept"] == sum(a["keep"]) / 4
        assert a["per_token_advantages"] and b["per_token_advantages"]


def test_each_rank_applies_its_own_slice(views):
    dropped_somewhere = False
    for a, b in zip(views[0]["views"], views[1]["views"]):
        assert a["rows"] == [0, 8] and b["rows"] == [8, 16]
        N, keep, lengths = a["N"], a["keep"], a["lengths"]
        stays = [k == 1 and n > 0 for k, n in zip(keep, lengths)]  # renormalize: kept, non-empty
        assert a["local_loss_rows"] + b["local_loss_rows"] == [int(s) for s in stays]
        assert a["local_kept_rows"] + b["local_kept_rows"] == sum(stays)
        assert a["num_items_in_batch"] == sum(n for n, s in zip(lengths, stays) if s)
        assert a["advantage_scale"] == pytest.approx(N / sum(stays))
        dropped_somewhere |= sum(stays) < N
    assert dropped_somewhere, "difffilter dropped nothing: the test shows no drop"


def test_each_rank_applies_its_slice_of_the_token_weights(views):
    """ar: each rank's per-token weights for its rows, concatenated, are the [N, T] weights
    of the one decision; and they are what its loss reads (advantage = TRL's x w_t x c)."""
    for a, b in zip(views[0]["views"], views[1]["views"]):
        assert a["token_weights_slice"] + b["token_weights_slice"] == a["token_weights"]
        assert len(a["token_weights_slice"]) == len(b["token_weights_slice"]) == 8
        assert a["applied_matches_weights"] and b["applied_matches_weights"]
        kept = [w for row, k in zip(a["token_weights"], a["keep"]) if k for w in row if w > 0]
        assert max(kept) - min(kept) > 1e-3, "ar weighted every token alike"


def test_the_second_draw_follows_the_first_decisions_proportions(views):
    """reward_gap updates after every decision; the next intake draws its quotas from them."""
    first, second = views[0]["views"]
    target = first["proportions"]  # over the sorted domains: easy, hard, mid
    assert max(target) - min(target) > 0.1  # the mixer moved away from uniform
    prompts = 4
    floors = [int(p * prompts) for p in target]
    by_remainder = sorted(range(3), key=lambda d: -(target[d] * prompts - floors[d]))
    for d in by_remainder[: prompts - sum(floors)]:
        floors[d] += 1
    # tiny_dataset(16): rows 0-15 easy, 16-31 mid, 32-47 hard; one key per completion
    name = {0: "easy", 1: "mid", 2: "hard"}
    drawn = [name[int(k) // 16] for k in second["prompt_keys"][::4]]
    assert [drawn.count(d) for d in ("easy", "hard", "mid")] == floors


def test_micro_batch_masks_equal_trls_gathered_over_both_ranks(tmp_path):
    """`trl_entropy_ranks_run.py`: ``scope: micro_batch`` pools each micro-batch over both
    processes, as TRL's ``top_entropy_quantile`` does; every loss call on every rank compares
    the decision's mask on its rows with the one TRL applied."""
    out = tmp_path / "entropy"
    out.mkdir()
    torchrun("trl_entropy_ranks_run.py", out)
    calls = [
        c for p in (0, 1) for c in json.loads((out / f"entropy_rank{p}.json").read_text())["calls"]
    ]
    # 2 generations x 2 micro-batches x 2 ranks, each micro-batch one of the predicted ones
    assert len(calls) == 8 and all(len(c["micro_batch"]) == 1 for c in calls)
    assert all(c["equal"] for c in calls), calls
    kept, tokens = sum(c["kept"] for c in calls), sum(c["tokens"] for c in calls)
    assert 0.15 < kept / tokens < 0.5


def test_until_signal_rounds_are_shared_by_both_ranks(tmp_path):
    # G = 3 over 2 ranks: each until_signal round's prompts are rounded up to an even number
    # (one share per rank); both ranks assemble the same balanced groups and take their rows
    torchrun("trl_ranks_run.py", tmp_path, "grpo", "rollouts")
    views = [json.loads((tmp_path / f"rank{p}.json").read_text())["views"] for p in (0, 1)]
    assert len(views[0]) == len(views[1]) == 2
    assert sum(v["rollouts_rounds"] for v in views[0]) > 0
    for a, b in zip(*views):
        for key in ("N", "rewards", "prompt_keys", "keep", "weights", "rollouts_generated"):
            assert a[key] == b[key], key
        assert a["N"] == 6 and [a["rows"], b["rows"]] == [[0, 3], [3, 6]]
        assert a["applied_matches_weights"] and b["applied_matches_weights"]
