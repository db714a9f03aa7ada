"""What the TRL host reads from the trainer's model and ranks (prompt representations,
gathered per-token fields, predicted loss micro-batches). Needs TRL."""

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


def gather_token_fields(trainer, out: dict, loss_mask: torch.Tensor, entropies: bool = False):
    """([N, T] loss mask, [N, T] old log-probs, [N, T] entropies or None) of a generation's
    output ``out``, padded across ranks and gathered. What TRL did not compute (old log-probs
    on-policy, entropies) comes from one no-grad pass of TRL's own
    ``_get_per_token_logps_and_entropies``."""
    old = out.get("old_per_token_logps")
    ent = None
    if old is None or entropies:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        kwargs = trainer.args.gradient_checkpointing_kwargs
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, kwargs):
            logps, ent, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                ids,
                attn,
                out["completion_ids"].size(1),
                batch_size=trainer.args.per_device_train_batch_size,
                compute_entropy=entropies,
            )
        old = logps if old is None else old  # TRL's own when it has them
    acc = trainer.accelerator
    mask = acc.gather(acc.pad_across_processes(loss_mask.int(), dim=1)).cpu().bool()
    logps = acc.gather(acc.pad_across_processes(old.float(), dim=1)).cpu()
    zero = torch.zeros((), dtype=torch.float32)
    if ent is not None:
        ent = acc.gather(acc.pad_across_processes(ent.float(), dim=1)).cpu()
        ent = torch.where(mask, ent, zero)
    return mask, torch.where(mask, logps, zero), ent


#: the key of each row's local index in a generation's output when micro-batches are
#: predicted (`predicted_micro_batches`): it travels through TRL's shuffle and split, and the
#: loss checks that each micro-batch holds the rows predicted for it
ROW_KEY = "dataflex_row"


def predicted_micro_batches(trainer, n: int) -> torch.Tensor:
    """[n] int64: the loss micro-batch each of this rank's ``n`` rows will be trained in.

    TRL 1.16's ``_prepare_inputs`` shuffles with ``torch.randperm(n)`` on the global CPU
    generator, then splits into ``steps_per_generation`` micro-batches: the permutation is
    drawn here from a copy of that generator's state; `check_micro_batch` verifies it.
    """
    fork = torch.Generator()
    fork.set_state(torch.get_rng_state())
    perm = torch.randperm(n, generator=fork)
    size = n // trainer.args.steps_per_generation
    micro = torch.empty(n, dtype=torch.int64)
    micro[perm] = torch.arange(n, dtype=torch.int64) // size
    return micro


def check_micro_batch(inputs: dict, predicted: torch.Tensor, index: int) -> None:
    """Raise unless the rows of this micro-batch (``inputs[ROW_KEY]``) are the ones
    `predicted_micro_batches` placed in micro-batch ``index``."""
    rows = inputs[ROW_KEY].cpu()
    got = predicted[rows]
    if not bool((got == index).all()):
        raise RuntimeError(
            f"dataflex: micro-batch {index} holds rows predicted for micro-batches "
            f"{sorted(set(got.tolist()))}: TRL's shuffle drew another permutation than the "
            "one predicted (something used the global torch generator in between); the "
            "decision's micro_batch scope does not match TRL's micro-batches"
        )
