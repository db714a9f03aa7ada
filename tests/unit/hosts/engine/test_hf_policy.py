"""Any local Hugging Face causal-LM directory works as a policy (its own tokenizer)."""

from __future__ import annotations

import pytest
import torch

from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.data import tasks_from_config
from dataflex_rl.hosts.engine.policy import load_policy, tiny_config
from dataflex_rl.hosts.engine.tokenizer import HFTokenizer
from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

from .conftest import SMALL_ARCH


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A local HF model directory: a small Llama and a character-level fast tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    tasks = tasks_from_config(load_config({"tasks": {"train_size": 20, "eval_size": 4}}))
    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + list(tasks.charset()))}
    # BPE without merges and without a pre-tokenizer splits text into characters
    core = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = tokenizers.decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(tiny_config(len(vocab), **SMALL_ARCH))
    out = tmp_path_factory.mktemp("hf")
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def test_hf_directory_loads_with_its_tokenizer(hf_dir):
    policy = load_policy(hf_dir)
    assert isinstance(policy.tokenizer, HFTokenizer)
    tok = policy.tokenizer
    ids = tok.encode("12kg=?g")
    assert len(ids) == 7 and tok.decode(ids + [tok.eos_id] + ids) == "12kg=?g"


def test_hf_directory_trains_in_the_engine(hf_dir):
    cfg = load_config(
        {
            "policy": str(hf_dir),
            "tasks": {"train_size": 20, "eval_size": 4},
            "grpo": {"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 3},
        }
    )
    tr = EmbeddedTrainer(cfg, "baseline", seed=0)
    m = tr.train_step()
    assert m["engine/prompts_generated"] == 3.0
    assert set(tr.evaluate()) >= {"eval/math/greedy", "eval/mean/greedy"}
