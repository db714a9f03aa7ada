#!/usr/bin/env bash
# The test command: set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# lint and format are part of the test command (config in pyproject.toml [tool.ruff])
.venv/bin/ruff check src tests benchmarks examples scripts
.venv/bin/ruff format --check --quiet src tests benchmarks examples scripts
# slow tests (re-running the warm-start bootstrap) are part of the test command
export DATAFLEX_RUN_SLOW="${DATAFLEX_RUN_SLOW:-1}"
.venv/bin/python -m pytest -q "$@"
# the verl host against real verl 0.9.1, in its own venv (DATAFLEX_SKIP_VERL=1 skips it)
if [ $# -eq 0 ] && [ "${DATAFLEX_SKIP_VERL:-0}" != 1 ]; then
  bash scripts/setup_verl.sh
  .venv-verl/bin/python -m pytest -q tests/hosts
fi
# the TRL host against real TRL 1.16, in its own venv (DATAFLEX_SKIP_TRL=1 skips it)
if [ $# -eq 0 ] && [ "${DATAFLEX_SKIP_TRL:-0}" != 1 ]; then
  bash scripts/setup_trl.sh
  HF_HUB_OFFLINE=1 .venv-trl/bin/python -m pytest -q tests/hosts_trl
fi
