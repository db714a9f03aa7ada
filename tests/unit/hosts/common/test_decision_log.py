"""The decision log writer: columns, files, metadata, crash behaviour, truncation."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from dataflex_rl import Strategy
from dataflex_rl.core.batch import from_lists
from dataflex_rl.hosts.common.decision_log import RESPONSES, SCHEMA_VERSION, STEPS, DecisionLog
from tests.decision_logs import DOMAINS, make_batch, write_log


def test_hand_worked_step(tmp_path):
    # two groups of 3; group 0 solves 1 of 3 (rate 1/3: kept by difffilter), group 1 none
    b = from_lists(
        [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [0, 0, 0, 1, 1, 1],
        [3, 1, 2, 4, 4, 2],
        advantages=[1.1547, -0.5774, -0.5774, 0.0, 0.0, 0.0],
        prompt_keys=("a",) * 3 + ("b",) * 3,
        step=7,
    )
    st = Strategy("difffilter")
    d = st.decide(b)
    log = DecisionLog(
        tmp_path,
        domains=("default",),
        strategy_spec=st.spec.to_dict(),
        host="test",
        steps_per_file=1,
    )
    log.record(b, d)
    t = pq.read_table(tmp_path / RESPONSES).to_pydict()
    assert t["step"] == [7] * 6
    assert t["group"] == [0, 0, 0, 1, 1, 1]
    assert t["prompt_key"] == ["a", "a", "a", "b", "b", "b"]
    assert t["domain"] == ["default"] * 6
    assert t["length"] == [3, 1, 2, 4, 4, 2]
    assert t["keep"] == [True, True, True, False, False, False]
    assert t["weight"] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert t["advantage"] == pytest.approx([1.1547, -0.5774, -0.5774, 0, 0, 0], abs=1e-6)
    assert np.isnan(t["logprob_mean"]).all()  # the batch has no old log-probs
    s = pq.read_table(tmp_path / STEPS).to_pylist()[0]
    assert (s["step"], s["responses"], s["groups"], s["max_length"], s["tokens"], s["kept"]) == (
        7,
        6,
        2,
        4,
        16,
        3,
    )
    assert s["actual_default"] == 1.0 and np.isnan(s["target_default"])


def test_advantage_is_the_exact_token_value_and_the_mean_is_the_summary(tmp_path):
    # a float32 sum of n equal values does not always divide back to the value; the logged
    # `advantage` must (replay rebuilds the tokens from it)
    write_log(tmp_path, "baseline", 4)
    t = pq.read_table(tmp_path / RESPONSES)
    for s in range(4):
        b = make_batch(s)
        rows = t.filter(pq.filters_to_expression([("step", "=", s)])).to_pydict()
        first = b.advantages[:, 0].numpy()  # every length >= 1
        assert np.array_equal(np.array(rows["advantage"], np.float32), first)
        plain = (b.advantages.sum(1) / b.response_length).numpy()
        assert np.allclose(rows["advantage_mean"], plain, atol=1e-6)
        lp = ((b.old_log_probs * b.response_mask).sum(1) / b.response_length).numpy()
        assert np.allclose(rows["logprob_mean"], lp, atol=1e-5)
        keys = rows["prompt_key"]
        assert tuple(keys) == b.prompt_keys  # a plain-loop oracle
        assert [DOMAINS.index(x) for x in rows["domain"]] == b.domain_ids.tolist()


def test_per_response_advantages_are_logged_as_given_without_a_token_read(tmp_path, monkeypatch):
    # a host that passes response_advantages: both advantage columns are those values
    # (exact), and the step says so (replay then passes them the same way)
    import dataflex_rl.hosts.common.decision_log as decision_log

    summed = []  # the [B, T] tensors the log reduces
    real = decision_log.masked_row_sums
    monkeypatch.setattr(
        decision_log, "masked_row_sums", lambda x, m: summed.append(x) or real(x, m)
    )
    _, pairs = write_log(tmp_path, "baseline", 2, per_response=True)
    t = pq.read_table(tmp_path / RESPONSES).to_pydict()
    steps = pq.read_table(tmp_path / STEPS).to_pydict()
    assert steps["per_response_advantages"] == [True, True]
    want = np.concatenate([b.response_advantages.numpy() for b, _ in pairs])
    assert np.array_equal(np.array(t["advantage"], np.float32), want)
    assert np.array_equal(np.array(t["advantage_mean"], np.float32), want)
    # no pass over the advantages (the old log-probs are summed, for logprob_mean)
    ptrs = {x.data_ptr() for x in summed}
    assert summed and not any(b.advantages.data_ptr() in ptrs for b, _ in pairs)
    summed.clear()
    _, tok = write_log(tmp_path / "tok", "baseline", 1)
    assert tok[0][0].advantages.data_ptr() in {x.data_ptr() for x in summed}  # token inputs
    assert pq.read_table(tmp_path / "tok" / STEPS)["per_response_advantages"].to_pylist() == [False]


def test_files_per_n_steps_metadata_and_schema_version(tmp_path):
    st, _ = write_log(tmp_path, "dump_ucb", 10, steps_per_file=4)
    for table in (RESPONSES, STEPS):
        names = sorted(p.name for p in (tmp_path / table).iterdir())
        assert names == [
            "part-000000000.parquet",
            "part-000000004.parquet",
            "part-000000008.parquet",
        ]
        meta = pq.read_schema(tmp_path / table / names[0]).metadata
        assert int(meta[b"dataflex.schema_version"]) == SCHEMA_VERSION
        assert meta[b"dataflex.table"].decode() == table
        assert json.loads(meta[b"dataflex.domains"]) == list(DOMAINS)
        assert json.loads(meta[b"dataflex.strategy"]) == st.spec.to_dict()
    steps = pq.read_table(tmp_path / STEPS).to_pydict()
    assert steps["step"] == list(range(10))
    # dump_ucb: warm-up 5, every 5 -> updates after the 5th and 10th decisions
    assert [i for i, u in enumerate(steps["mix_updated"]) if u] == [4, 9]
    assert steps["next_math"][4] == pytest.approx(steps["target_math"][5])


def test_a_crash_loses_at_most_the_open_file(tmp_path):
    write_log(tmp_path, "baseline", 6, steps_per_file=4, close=False)
    assert sorted(pq.read_table(tmp_path / STEPS).to_pydict()["step"]) == [0, 1, 2, 3]
    assert not list(tmp_path.rglob("*.tmp"))


def test_truncate_drops_the_steps_after_a_checkpoint(tmp_path):
    write_log(tmp_path, "baseline", 10, steps_per_file=4)
    log = DecisionLog(tmp_path, domains=DOMAINS, strategy_spec={}, host="test")
    log.truncate(6)
    assert pq.read_table(tmp_path / STEPS).to_pydict()["step"] == [0, 1, 2, 3, 4, 5]
    assert sorted(set(pq.read_table(tmp_path / RESPONSES).to_pydict()["step"])) == list(range(6))
    assert not (tmp_path / STEPS / "part-000000008.parquet").exists()


def test_full_tokens_are_list_columns_of_the_valid_tokens(tmp_path):
    write_log(tmp_path, "baseline", 2, full_tokens=True, token_prob_mean=True)
    t = pq.read_table(tmp_path / RESPONSES)
    b = make_batch(1)
    rows = t.filter(pq.filters_to_expression([("step", "=", 1)])).to_pydict()
    for i in range(b.batch_size):  # plain loop: the oracle
        n = int(b.response_length[i])
        assert rows["logprob_tokens"][i] == pytest.approx(b.old_log_probs[i, :n].tolist())
        assert rows["advantage_tokens"][i] == pytest.approx(b.advantages[i, :n].tolist())
        p = torch.exp(b.old_log_probs[i, :n]).mean().item()
        assert rows["prob_mean"][i] == pytest.approx(p, rel=1e-5)


def test_integer_prompt_keys_stay_integers(tmp_path):
    b = from_lists([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], prompt_keys=(11, 11, 42, 42))
    st = Strategy("baseline")
    log = DecisionLog(tmp_path, domains=None, strategy_spec={}, host="test", steps_per_file=1)
    log.record(b, st.decide(b))
    assert pq.read_table(tmp_path / RESPONSES).to_pydict()["prompt_key"] == [11, 11, 42, 42]


def test_readable_without_this_package(tmp_path):
    write_log(tmp_path, "difffilter", 3)
    code = (
        f"import sys; sys.modules['dataflex_rl'] = None\n"
        f"import pyarrow.parquet as pq\n"
        f"t = pq.read_table({str(tmp_path / RESPONSES)!r})\n"
        f"s = pq.read_table({str(tmp_path / STEPS)!r})\n"
        f"print(t.num_rows, s.num_rows, sorted(set(t.column('domain').to_pylist())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:2] == ["96", "3"]
    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(tmp_path / RESPONSES)
    assert len(frame) == 96 and frame["keep"].dtype == bool
