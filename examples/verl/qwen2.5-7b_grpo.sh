#!/usr/bin/env bash
# GRPO on Qwen2.5-7B-Instruct with a dataflex strategy, one node of 8 x 80 GB.
#   bash examples/verl/qwen2.5-7b_grpo.sh mix
#   NNODES=2 bash examples/verl/qwen2.5-7b_grpo.sh combined trainer.total_epochs=3
set -euo pipefail
source "$(dirname "$0")/common.sh"
STRATEGY="${1:-baseline}"; shift || true
mapfile -t DATAFLEX < <(dataflex_overrides "$STRATEGY")

launch "${BASE[@]}" "${DATAFLEX[@]}" \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \
  data.train_batch_size=512 \
  data.max_prompt_length=1024 \
  data.max_response_length=2048 \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=128 \
  actor_rollout_ref.actor.use_dynamic_bsz=True \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576 \
  actor_rollout_ref.actor.fsdp_config.param_offload=False \
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
  actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  actor_rollout_ref.ref.fsdp_config.param_offload=True \
  trainer.experiment_name="qwen2.5-7b-$(basename "${STRATEGY%.yaml}")" \
  trainer.total_epochs=5 \
  "$@"
