#!/usr/bin/env bash
# GRPO on Qwen2.5-0.5B-Instruct with a dataflex strategy, one node.
#   bash examples/verl/qwen2.5-0.5b_grpo.sh select            # strategies/select.yaml
#   bash examples/verl/qwen2.5-0.5b_grpo.sh difffilter        # a preset name
#   bash examples/verl/qwen2.5-0.5b_grpo.sh my.yaml trainer.total_epochs=5   # + any override
set -euo pipefail
source "$(dirname "$0")/common.sh"
STRATEGY="${1:-baseline}"; shift || true
mapfile -t DATAFLEX < <(dataflex_overrides "$STRATEGY")

launch "${BASE[@]}" "${DATAFLEX[@]}" \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
  data.train_batch_size=256 \
  data.max_prompt_length=512 \
  data.max_response_length=1024 \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=64 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  trainer.experiment_name="qwen2.5-0.5b-$(basename "${STRATEGY%.yaml}")" \
  trainer.total_epochs=10 \
  "$@"
