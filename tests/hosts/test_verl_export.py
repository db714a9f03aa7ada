"""The exported tasks and policy through verl 0.9.1's own pieces: its dataset reads the parquet,
its rollout tokenization (the Continuous Token builder a llama model gets) gives the engine's
prompt ids, and ``pkg://dataflex_rl.tasks.rewards`` loads as verl loads a custom reward."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pytest.importorskip("verl")

from dataflex_rl.cli import main  # noqa: E402
from dataflex_rl.hosts.engine.policy import ASSETS_DIR  # noqa: E402
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer  # noqa: E402
from dataflex_rl.tasks.export import REWARDS  # noqa: E402


def test_verl_reads_the_export_with_the_engine_prompts_and_rewards(tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.import_utils import load_extern_object
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    assert main(["export", "policy", "--out", str(tmp_path / "policy")]) == 0
    argv = ["export", "tasks", "tasks.train_size=20", "eval.per_domain=5"]
    assert main([*argv, "--out", str(tmp_path / "tasks")]) == 0
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "policy"))
    files = [str(tmp_path / "tasks" / "eval" / f"{d}.parquet") for d in ("math", "logic")]
    config = {"max_prompt_length": 53, "filter_overlong_prompts_workers": 1}
    data = RLHFDataset(data_files=files, tokenizer=tok, config=OmegaConf.create(config))
    assert len(data) == 10
    builder = create_continuous_token_builder(tok, hf_model_type="llama")
    char = CharTokenizer.load(ASSETS_DIR / "tiny")
    for i in range(len(data)):
        messages = list(data[i]["raw_prompt"])
        ids = builder.build_initial_tokens(messages)
        assert ids == [char.bos_id, *char.encode(messages[0]["content"])]
    score = load_extern_object(REWARDS["verl"]["path"], REWARDS["verl"]["name"])
    row = pq.read_table(files[1]).to_pylist()[0]
    truth = row["reward_model"]["ground_truth"]
    kw = dict(data_source=row["data_source"], ground_truth=truth, extra_info=row["extra_info"])
    assert (score(solution_str=truth, **kw), score(solution_str=truth + "a", **kw)) == (1.0, 0.0)
