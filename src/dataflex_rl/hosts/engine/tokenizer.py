"""Tokenizers the engine speaks: a character tokenizer built in code, and an adapter for HF ones.

Both give ``encode`` (no specials), ``decode`` (specials dropped), ``pad_id``, ``bos_id``,
``eos_id``, ``vocab_size`` and ``save``. A prompt is ``[bos] + encode(prompt)``, a target
response ``encode(answer) + [eos]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

#: special tokens of `CharTokenizer`, in id order
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
TOKENIZER_FILE = "char_tokenizer.json"
#: chat template of `hf_tokenizer`: BOS, then the messages' contents joined by blank lines (as
#: the dataset loader joins a chat prompt); roles add nothing, no generation prompt
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if not loop.first %}{{ '\\n\\n' }}"
    "{% endif %}{{ message['content'] }}{% endfor %}"
)


class CharTokenizer:
    """One token per character of ``chars`` (in id order, no duplicates), after ``<pad>`` (0),
    ``<bos>`` (1), ``<eos>`` (2), ``<unk>`` (3)."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, chars: Sequence[str]) -> None:
        chars = list(chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"CharTokenizer: every entry must be one character, got {bad[:5]}")
        if len(set(chars)) != len(chars):
            dup = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"CharTokenizer: duplicate characters {dup}")
        self.chars = chars
        self._ids = {c: i + len(SPECIALS) for i, c in enumerate(chars)}

    @classmethod
    def from_charset(cls, charset: Iterable[str]) -> CharTokenizer:
        """A tokenizer over the sorted union of ``charset`` (strings or characters)."""
        return cls(sorted(set("".join(charset))))

    @property
    def vocab_size(self) -> int:
        """Number of token ids (specials included)."""
        return len(SPECIALS) + len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``'s characters; unknown characters map to ``<unk>``."""
        return [self._ids.get(c, self.unk_id) for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, stopping at the first ``<eos>``; other specials are dropped."""
        out = []
        n = len(SPECIALS)
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i >= n and i - n < len(self.chars):
                out.append(self.chars[i - n])
        return "".join(out)

    def save(self, directory: str | Path) -> Path:
        """Write ``char_tokenizer.json`` into ``directory``; returns its path."""
        path = Path(directory) / TOKENIZER_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"type": "char", "specials": list(SPECIALS), "chars": self.chars}
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CharTokenizer:
        """Read what `save` wrote (a directory or the JSON file itself)."""
        path = Path(directory)
        if path.is_dir():
            path = path / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no character tokenizer here")
        data = json.loads(path.read_text())
        if data.get("type") != "char" or tuple(data.get("specials", ())) != SPECIALS:
            raise ValueError(f"{path}: not a dataflex-rl character tokenizer")
        return cls(data["chars"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and other.chars == self.chars

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class HFTokenizer:
    """Adapter giving a ``transformers`` tokenizer the `CharTokenizer` surface; a missing pad
    or BOS token falls back to EOS."""

    def __init__(self, tok) -> None:
        if tok.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; the engine needs one to stop")
        self.tok = tok
        self.eos_id = int(tok.eos_token_id)
        self.pad_id = int(tok.pad_token_id) if tok.pad_token_id is not None else self.eos_id
        self.bos_id = int(tok.bos_token_id) if tok.bos_token_id is not None else self.eos_id

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.tok)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS, special tokens dropped."""
        ids = [int(i) for i in ids]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tok.decode(ids, skip_special_tokens=True)

    def save(self, directory: str | Path) -> Path:
        """Save the wrapped tokenizer with ``save_pretrained``."""
        self.tok.save_pretrained(str(directory))
        return Path(directory)


def hf_tokenizer(tok: CharTokenizer, model_max_length: int | None = None):
    """``tok`` as a Hugging Face ``PreTrainedTokenizerFast`` with the same ids (left padding;
    ``model_max_length`` None: unlimited).

    Encoding prepends ``<bos>`` unless ``add_special_tokens=False`` (then it equals
    ``tok.encode``); a chat prompt gets the same from `CHAT_TEMPLATE`. Unlike `CharTokenizer`,
    text holding a special token's spelling (``"<eos>"``) is read as that token.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({c: i + len(SPECIALS) for i, c in enumerate(tok.chars)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIALS[tok.unk_id]))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(""), behavior="isolated")
    core.decoder = decoders.Fuse()
    bos = SPECIALS[tok.bos_id]
    core.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.bos_id)]
    )
    extra = {} if model_max_length is None else {"model_max_length": model_max_length}
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=SPECIALS[tok.pad_id],
        bos_token=bos,
        eos_token=SPECIALS[tok.eos_id],
        unk_token=SPECIALS[tok.unk_id],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
        **extra,
    )
