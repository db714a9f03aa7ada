#!/usr/bin/env bash
# One run per mechanism (and the baseline) with the same model, data and seed, for a first
# comparison. MODEL_SCRIPT defaults to the 0.5B script; extra arguments go to every run.
#   bash examples/verl/run_mechanisms.sh trainer.total_epochs=2
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
MODEL_SCRIPT="${MODEL_SCRIPT:-$HERE/qwen2.5-0.5b_grpo.sh}"
for strategy in baseline select reweight mix prerollout combined; do
  echo "=== $strategy"
  bash "$MODEL_SCRIPT" "$strategy" "$@"
done
