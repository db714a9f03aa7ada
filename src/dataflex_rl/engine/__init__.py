"""Embedded GRPO engine: policy, sampler, loss, warm start, trainer loop, checkpoints."""
