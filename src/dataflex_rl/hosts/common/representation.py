"""A prompt's representation by the policy itself (`SkipPolicy.feature_layer`): mean-pooled
hidden states after a few decoder layers, for the engine and TRL (torch and a HF causal LM)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """[N, P] left-padded ids and [N, P] bool mask (one scatter, no loop over prompts)."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    if lengths.numel() == 0 or bool((lengths == 0).any()):
        raise ValueError("prompt_representation: every prompt needs at least one token")
    P = int(lengths.max())
    mask = torch.arange(P)[None, :] >= (P - lengths)[:, None]
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.int64)
    ids[mask] = torch.tensor([t for p in prompts for t in p], dtype=torch.int64)
    return ids, mask


class _Stop(Exception):
    """Raised by a forward hook to end a forward pass early (carries nothing)."""


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a Hugging Face causal LM (``model.model.layers``)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"{type(model).__name__}: no decoder layers at model.model.layers; use a probe "
            "layer of 0 (the token embeddings)"
        )
    return layers


@torch.no_grad()
def prompt_representation(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], layer: int, pad_id: int
) -> tuple[Tensor, float]:
    """Mean-pooled hidden states of each of N prompts (id lists, BOS included) after
    ``layer`` decoder layers (0: the token embeddings); a hook stops the forward pass there.

    Returns:
        ([N, H] float32, the cost in prompt tokens: prompt tokens x ``layer`` / layers).
    """
    ids, mask = _left_pad(prompts, pad_id)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    weight = mask.to(torch.float32)[:, :, None]
    if layer == 0:
        hidden = model.get_input_embeddings()(ids)
        cost = 0.0
    else:
        layers = decoder_layers(model)
        if layer > len(layers):
            raise ValueError(f"probe layer {layer}: the model has {len(layers)} layers")
        captured: dict[str, Tensor] = {}

        def stop(_module, _inputs, output):
            captured["h"] = output[0] if isinstance(output, tuple) else output
            raise _Stop

        was_training = model.training
        model.eval()
        handle = layers[layer - 1].register_forward_hook(stop)
        try:
            model(
                input_ids=ids,
                attention_mask=mask.long(),
                position_ids=(mask.long().cumsum(1) - 1).clamp(min=0),
                use_cache=False,
            )
        except _Stop:
            pass
        finally:
            handle.remove()
            model.train(was_training)
        hidden = captured["h"]
        cost = float(mask.sum()) * layer / len(layers)
    pooled = (hidden.float() * weight).sum(1) / weight.sum(1)
    return pooled.cpu(), cost
