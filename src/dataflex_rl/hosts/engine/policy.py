"""The policy: the tiny Llama-style preset, saved checkpoints, or any local HF causal LM."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dataflex_rl.hosts.engine.tokenizer import TOKENIZER_FILE, CharTokenizer, HFTokenizer

#: where the shipped warm-started tiny checkpoint lives
ASSETS_DIR = Path(__file__).parent / "assets"
TINY_NAME = "tiny"

#: architecture of the tiny preset (≈0.9M parameters with a ~60-character vocabulary)
TINY_ARCH: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


@dataclass
class Policy:
    """A ``transformers`` causal LM, its tokenizer and its source ("tiny", a path, or
    "tiny-init(seed=…)")."""

    model: torch.nn.Module
    tokenizer: CharTokenizer | HFTokenizer
    source: str

    @property
    def num_parameters(self) -> int:
        """Number of parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.model.parameters())


def tiny_config(vocab_size: int, **overrides: Any):
    """``LlamaConfig`` of the tiny preset for ``vocab_size`` tokens (``overrides`` win)."""
    from transformers import LlamaConfig

    unknown = [k for k in overrides if k not in TINY_ARCH]
    if unknown:
        raise ValueError(
            f"tiny_config: unknown architecture key(s) {unknown}; valid: {', '.join(TINY_ARCH)}"
        )
    arch = {**TINY_ARCH, **overrides}
    return LlamaConfig(
        vocab_size=vocab_size,
        pad_token_id=CharTokenizer.pad_id,
        bos_token_id=CharTokenizer.bos_id,
        eos_token_id=CharTokenizer.eos_id,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        **arch,
    )


def build_tiny_policy(tokenizer: CharTokenizer, seed: int, **arch: Any) -> Policy:
    """A freshly initialized tiny policy; same seed and tokenizer -> same parameters (the
    global torch RNG is left untouched)."""
    from transformers import LlamaForCausalLM

    config = tiny_config(tokenizer.vocab_size, **arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return Policy(model, tokenizer, f"tiny-init(seed={seed})")


def extend_vocabulary(policy: Policy, chars: Iterable[str], *, init_std: float = 0.02) -> list[str]:
    """Add the characters of ``chars`` that a character tokenizer lacks (sorted: same data,
    same ids) and grow the model in place; returns them. Each new row starts at the mean row
    plus noise of std ``init_std`` seeded by the character itself (whatever else is added)."""
    tok = policy.tokenizer
    if not isinstance(tok, CharTokenizer):
        return []
    added = sorted(set("".join(chars)) - set(tok.chars))
    if not added:
        return []
    model = policy.model
    old = model.get_input_embeddings().weight.detach().clone()
    n_old = old.shape[0]
    new_size = n_old + len(added)
    kw = (
        {"mean_resizing": False}
        if "mean_resizing" in inspect.signature(model.resize_token_embeddings).parameters
        else {}
    )
    with torch.random.fork_rng(devices=[]):
        model.resize_token_embeddings(new_size, **kw)
    rows = torch.stack([_char_row(c, old.mean(0), init_std) for c in added])
    with torch.no_grad():
        model.get_input_embeddings().weight[n_old:] = rows
        head = model.get_output_embeddings()
        if (
            head is not None
            and head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
        ):
            head.weight[n_old:] = rows
    model.config.vocab_size = new_size
    policy.tokenizer = CharTokenizer([*tok.chars, *added])
    return added


def _char_row(char: str, mean: Tensor, std: float) -> Tensor:
    seed = int.from_bytes(hashlib.sha256(char.encode("utf-8")).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    return mean + std * torch.randn(mean.shape, generator=gen, dtype=mean.dtype)


def context_length(policy: Policy) -> int | None:
    """The most positions the policy's model was built for (``max_position_embeddings``),
    or None when its config does not say."""
    n = getattr(policy.model.config, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def save_policy(policy: Policy, directory: str | Path) -> Path:
    """Write the model (``save_pretrained``, safetensors) and tokenizer into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_transformers():
        policy.model.save_pretrained(str(out))
    policy.tokenizer.save(out)
    return out


def load_policy(spec: str | Path = TINY_NAME) -> Policy:
    """Load ``"tiny"`` (the shipped warm-started checkpoint), a directory written by
    `save_policy`/``bootstrap``, or a local Hugging Face causal-LM directory (no network).

    Raises:
        FileNotFoundError: the path does not exist or holds no model.
    """
    from transformers import AutoModelForCausalLM
    from transformers import __version__ as transformers_version

    path = ASSETS_DIR / TINY_NAME if str(spec) == TINY_NAME else Path(spec)
    if not path.is_dir():
        raise FileNotFoundError(
            f"policy {str(spec)!r}: no such directory. Use 'tiny', a checkpoint written by "
            "'dataflex-rl bootstrap', or a local Hugging Face model directory"
        )
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"policy {str(spec)!r}: {path} has no config.json, so it is not a model directory"
        )
    dtype_kw = "dtype" if int(transformers_version.split(".")[0]) >= 5 else "torch_dtype"
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, **{dtype_kw: torch.float32}
        )
    model.eval()
    if (path / TOKENIZER_FILE).is_file():
        tokenizer: CharTokenizer | HFTokenizer = CharTokenizer.load(path)
    else:
        from transformers import AutoTokenizer

        tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
    return Policy(model, tokenizer, str(spec))


@contextlib.contextmanager
def _quiet_transformers():
    """No transformers progress bars inside the block (the previous setting is restored)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def parameter_hash(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer: names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def cache_argument(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument of ``model.forward``: ``past_key_values`` (transformers
    4.x and 5.x) or ``cache`` (later versions may rename it)."""
    params = inspect.signature(model.forward).parameters
    return "past_key_values" if "past_key_values" in params else "cache"


def new_cache(model: torch.nn.Module) -> Any:
    """An empty ``DynamicCache`` for ``model`` (given explicitly, transformers 4.x returns a
    cache object, not the legacy tuple, so the sampler can repeat it per group)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers 4.x: no config argument
        return DynamicCache()


def forward(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    position_ids: Tensor,
    cache: Any = None,
    use_cache: bool = False,
    cache_arg: str = "past_key_values",
):
    """Call ``model`` with the right cache keyword; returns ``(logits, cache)``. Ids and
    positions [N, L]; ``attention_mask`` [N, P + L] covers past and present tokens."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=use_cache,
        **{cache_arg: cache},
    )
    new_cache = getattr(out, "past_key_values", None)
    if new_cache is None:
        new_cache = getattr(out, "cache", None)
    return out.logits, new_cache
