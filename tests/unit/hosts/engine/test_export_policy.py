"""The tiny policy exported as a Hugging Face model directory: same weights and logits, a
``PreTrainedTokenizerFast`` with the character tokenizer's ids and the engine's prompt format,
and the engine itself evaluating the export exactly as it evaluates the shipped policy."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.engine.config import load_config
from dataflex_rl.hosts.engine.evaluation import evaluate
from dataflex_rl.hosts.engine.export import export_policy
from dataflex_rl.hosts.engine.policy import (
    ASSETS_DIR,
    cache_argument,
    forward,
    load_policy,
    parameter_hash,
)
from dataflex_rl.hosts.engine.tokenizer import SPECIALS, CharTokenizer, HFTokenizer
from dataflex_rl.hosts.engine.trainer import tasks_from_config

SHIPPED = json.loads((ASSETS_DIR / "tiny" / "MANIFEST.json").read_text())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "tiny"
    export_policy("tiny", out)
    return out


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


@pytest.fixture(scope="module")
def hf_tok(exported):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(exported))


@pytest.fixture(scope="module")
def default_tasks():
    return tasks_from_config(load_config())


def _left_padded(rows: list[list[int]], pad: int):
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def test_the_exported_model_has_the_same_weights_and_logits(exported, tiny, default_tasks):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(exported)).eval()
    assert parameter_hash(model) == parameter_hash(tiny.model) == SHIPPED["parameter_sha256"]
    manifest = json.loads((exported / "MANIFEST.json").read_text())
    assert manifest["export"]["parameter_sha256"] == SHIPPED["parameter_sha256"]
    assert manifest["bootstrap_args"] == SHIPPED["bootstrap_args"]  # the provenance travels
    tok = tiny.tokenizer
    prompts = [default_tasks.eval[d][i].prompt for d in default_tasks.domains for i in range(3)]
    ids, mask, pos = _left_padded([[tok.bos_id, *tok.encode(p)] for p in prompts], tok.pad_id)
    with torch.no_grad():
        ours, _ = forward(tiny.model, ids, mask, pos, cache_arg=cache_argument(tiny.model))
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert ours.shape == (9, ids.shape[1], 33)
    assert torch.equal(ours, theirs)


def test_the_tokenizer_has_the_character_ids_hand_worked(hf_tok, tiny):
    from transformers import PreTrainedTokenizerFast

    assert isinstance(hf_tok, PreTrainedTokenizerFast)
    chars = tiny.tokenizer.chars
    assert hf_tok.get_vocab() == {t: i for i, t in enumerate([*SPECIALS, *chars])}
    ids = (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id)
    assert ids == (0, 1, 2, 3)
    assert hf_tok.padding_side == "left" and hf_tok.model_max_length == 64
    # chars: ',' '-' '0' '1' '2' ... '=' '?' from id 4: '1' is 7, '2' is 8, '=' 16, '?' 17
    assert hf_tok("12=?", add_special_tokens=False).input_ids == [7, 8, 16, 17]
    assert hf_tok("12=?").input_ids == [1, 7, 8, 16, 17]  # the engine's [bos] + encode
    assert hf_tok("1 x", add_special_tokens=False).input_ids == [7, 3, 3]  # no ' ', no 'x'
    assert hf_tok.decode([1, 7, 8, 3, 16, 2, 0, 0], skip_special_tokens=True) == "12="


def test_every_default_prompt_and_answer_encodes_to_the_character_ids(hf_tok, tiny, default_tasks):
    texts = [
        t
        for pools in (default_tasks.train, default_tasks.eval)
        for problems in pools.values()
        for p in problems
        for t in (p.prompt, p.answer)
    ]
    assert len(texts) == 2 * 3 * 2200
    got = hf_tok(texts, add_special_tokens=False).input_ids
    assert got == [tiny.tokenizer.encode(t) for t in texts]
    assert hf_tok.batch_decode(got) == texts


def test_the_chat_template_gives_the_engine_prompt(hf_tok, tiny, default_tasks):
    enc = tiny.tokenizer.encode
    p = default_tasks.eval["logic"][0].prompt
    one = hf_tok.apply_chat_template(
        [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
    )
    assert list(getattr(one, "input_ids", one)) == [1, *enc(p)]  # one BOS, no role text
    two = [{"role": "system", "content": "1"}, {"role": "user", "content": "2"}]
    text = hf_tok.apply_chat_template(two, add_generation_prompt=True, tokenize=False)
    assert text == "<bos>1\n\n2"  # contents joined as the dataset loader joins them


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789,-=?Labkmst \n\té中Z")), max_size=40))
def test_any_text_encodes_and_decodes_as_the_character_tokenizer_does(hf_tok, text):
    tok = CharTokenizer.load(ASSETS_DIR / "tiny")
    ids = hf_tok(text, add_special_tokens=False).input_ids
    assert ids == tok.encode(text)  # unknown characters are <unk>, one per character
    assert hf_tok.decode([1, *ids, 2], skip_special_tokens=True) == tok.decode([1, *ids, 2])


def test_the_engine_evaluates_the_export_as_the_shipped_policy(exported, tiny, default_tasks):
    policy = load_policy(exported)
    assert isinstance(policy.tokenizer, HFTokenizer)  # the Hugging Face path, not the JSON
    kw = dict(per_domain=12, samples=2, temperature=1.0, max_new_tokens=10, seed=5)
    ours = evaluate(tiny, default_tasks, **kw)
    assert evaluate(policy, default_tasks, **kw) == ours
    assert 0.0 < ours["eval/mean/greedy"] < 1.0


def test_a_non_empty_directory_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"already holds keep\.txt.*--force"):
        export_policy("tiny", tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"
