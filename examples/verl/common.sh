# Shared by the launch scripts (source it): GRPO settings for verl 0.9.x and `launch`.
#
# Environment (all optional):
#   DATA_DIR    train.parquet / test.parquet from prepare_data.py  (default ~/data/dataflex_mix)
#   N_GPUS      GPUs per node (default 8), NNODES (default 1)
#   PROJECT     tracker project name (default dataflex_verl)
#   DATAFLEX_DRY_RUN=1   print the overrides, one per line, instead of training
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_DIR="${DATA_DIR:-$HOME/data/dataflex_mix}"
N_GPUS="${N_GPUS:-8}"
NNODES="${NNODES:-1}"
PROJECT="${PROJECT:-dataflex_verl}"

# strategy argument: a file in strategies/ by short name, any YAML path, or a preset name
resolve_strategy() {
  local s="${1:-baseline}"
  if [[ -f "$HERE/strategies/$s.yaml" ]]; then echo "$HERE/strategies/$s.yaml"
  else echo "$s"; fi
}

# the dataflex part: two lines in any verl launch
dataflex_overrides() {
  echo "trainer.v1.trainer_mode=dataflex"
  echo "+dataflex.strategy=$(resolve_strategy "$1")"
  echo "+dataflex.domain_key=domain"
}

BASE=(
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA_DIR/train.parquet"
  data.val_files="$DATA_DIR/test.parquet"
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.use_kl_loss=True
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.loss_agg_mode=token-mean
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=8
  reward.custom_reward_function.path="$HERE/reward.py"
  reward.custom_reward_function.name=compute_score
  trainer.critic_warmup=0
  trainer.logger=[console,wandb]
  trainer.project_name="$PROJECT"
  trainer.n_gpus_per_node="$N_GPUS"
  trainer.nnodes="$NNODES"
  trainer.save_freq=50
  trainer.test_freq=10
)

launch() {   # launch OVERRIDE...
  if [[ -n "${DATAFLEX_DRY_RUN:-}" ]]; then
    printf '%s\n' "$@"
  else
    exec python3 -m verl.trainer.main_ppo "$@"
  fi
}
