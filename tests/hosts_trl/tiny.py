"""A tiny causal LM, a character tokenizer and a three-domain prompt set, built offline.

Everything the TRL host tests need comes from code: no hub, no downloads. Importing this module
needs ``trl``'s environment (transformers 5.x, datasets, tokenizers); test files start with
``pytest.importorskip("trl")`` before importing it.
"""

from __future__ import annotations

import hashlib

#: the characters a prompt or completion can hold (plus the special tokens)
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 +-*/=?.,:"
#: each domain's chance that a completion is rewarded (both kept and dropped groups occur)
SUCCESS = {"easy": 0.9, "mid": 0.5, "hard": 0.1}


def tiny_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` (left padding, pad/eos/unk ids 0/1/2)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(""), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def tiny_model(tokenizer, seed: int = 0):
    """A 2-layer Qwen2 causal LM (hidden 64) in float32, initialised from ``seed``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).to(torch.float32)


def tiny_dataset(per_domain: int = 16):
    """``per_domain`` prompts in each of easy/mid/hard: columns prompt, domain, pid."""
    from datasets import Dataset

    rows = {"prompt": [], "domain": [], "pid": []}
    for domain in SUCCESS:
        for i in range(per_domain):
            rows["prompt"].append(f"{domain[0]}{i} {i % 7}+{i % 5}=?")
            rows["domain"].append(domain)
            rows["pid"].append(f"{domain}-{i}")
    return Dataset.from_dict(rows)


def hashed_reward(prompts, completions, domain, **_):
    """1.0 when a hash of prompt+completion falls under the domain's success rate, else 0.0.

    Deterministic, so a run and its resumed copy see the same rewards for the same text.
    """
    out = []
    for p, c, d in zip(prompts, completions, domain):
        h = int.from_bytes(hashlib.sha256(f"{p}|{c}".encode()).digest()[:8], "big")
        out.append(1.0 if h / 2**64 < SUCCESS[d] else 0.0)
    return out


def end_rank(trainer) -> None:
    """End a torchrun rank once its results are written: barrier, flush, ``os._exit(0)``.

    A plain return lets CPython finalize the interpreter while a gloo worker thread
    (``c10d::ProcessGroupGloo::runLoop``) may still hold the last reference to a finished
    collective's tensors; dropping it needs the GIL, a thread that takes the GIL during
    finalization is ended by ``pthread_exit``, and that unwind through a ``noexcept``
    destructor is ``std::terminate``: "terminate called without an active exception",
    SIGABRT after the work is done (stock TRL aborts the same way). Skipping the
    finalization after every rank is past its last collective ends the rank deterministically.
    See docs/hosts/trl.md#multi-process.
    """
    import os
    import sys

    trainer.accelerator.wait_for_everyone()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
