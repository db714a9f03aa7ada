"""What the TRL host reads from the trainer's model and ranks: the prompt representation a
skip policy may read, and the per-token fields (loss mask, old log-probs) a decision may read,
gathered over ranks. Needs TRL."""

from __future__ import annotations

import torch
from trl.models.utils import disable_gradient_checkpointing

from dataflex_rl.hosts.common.representation import prompt_representation


def prompt_features(trainer, rows: list[int], layer: int) -> tuple[torch.Tensor, float]:
    """The policy's representation of ``trainer``'s training rows (a skip policy that reads
    one): the prompts as TRL renders and tokenizes them, mean-pooled hidden states after
    ``layer`` layers (`prompt_representation`). Every rank computes the same."""
    from trl.data_utils import maybe_apply_chat_template

    tok = trainer.processing_class
    texts = [
        maybe_apply_chat_template({"prompt": trainer.train_dataset[r]["prompt"]}, tok)["prompt"]
        for r in rows
    ]
    ids = tok(text=texts, add_special_tokens=False)["input_ids"]
    model = trainer.accelerator.unwrap_model(trainer.model)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return prompt_representation(model, ids, layer, pad)


def gather_token_fields(trainer, out: dict, loss_mask: torch.Tensor):
    """([N, T] loss mask, [N, T] old log-probs) of a generation's output ``out``, padded
    across ranks and gathered.

    TRL computes old log-probs only off-policy; otherwise they are computed here, with the
    model that generated (one forward pass without gradients).
    """
    old = out.get("old_per_token_logps")
    if old is None:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        kwargs = trainer.args.gradient_checkpointing_kwargs
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, kwargs):
            old, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                ids,
                attn,
                out["completion_ids"].size(1),
                batch_size=trainer.args.per_device_train_batch_size,
            )
    acc = trainer.accelerator
    mask = acc.gather(acc.pad_across_processes(loss_mask.int(), dim=1)).cpu().bool()
    logps = acc.gather(acc.pad_across_processes(old.float(), dim=1)).cpu()
    return mask, torch.where(mask, logps, torch.zeros_like(logps))
