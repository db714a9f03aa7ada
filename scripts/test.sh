#!/usr/bin/env bash
# The test command: set up (if needed) and run the whole test suite.
#
# With no arguments it runs three suites in two lanes, side by side (each lane mostly keeps one
# core busy, so two lanes use a 2-core machine about twice as well as one):
#   lane 1: the main suite (.venv), in the foreground, its output as it comes;
#   lane 2: the verl host against real verl 0.9.1 (.venv-verl, tests/hosts), then the TRL host
#           against real TRL 1.16 (.venv-trl, tests/hosts_trl), each venv set up first; its
#           output is kept in .test-logs/hosts.log and printed when both lanes are done.
# DATAFLEX_SKIP_VERL=1 / DATAFLEX_SKIP_TRL=1 skip a host suite. With arguments, only the main
# suite runs, with them (e.g. bash scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# lint and format are part of the test command (config in pyproject.toml [tool.ruff])
.venv/bin/ruff check src tests benchmarks examples scripts
.venv/bin/ruff format --check --quiet src tests benchmarks examples scripts
# slow tests (re-running the warm-start bootstrap) are part of the test command
export DATAFLEX_RUN_SLOW="${DATAFLEX_RUN_SLOW:-1}"
if [ $# -ne 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi

hosts() {
  if [ "${DATAFLEX_SKIP_VERL:-0}" != 1 ]; then
    echo "== verl host suite (.venv-verl, tests/hosts)"
    bash scripts/setup_verl.sh
    .venv-verl/bin/python -m pytest -q tests/hosts
  fi
  if [ "${DATAFLEX_SKIP_TRL:-0}" != 1 ]; then
    echo "== TRL host suite (.venv-trl, tests/hosts_trl)"
    bash scripts/setup_trl.sh
    HF_HUB_OFFLINE=1 .venv-trl/bin/python -m pytest -q tests/hosts_trl
  fi
}

mkdir -p .test-logs
start=$SECONDS
(set -e; hosts; echo "== host suites passed ($((SECONDS - start)) s)") >.test-logs/hosts.log 2>&1 &
lane2=$!
echo "== main suite (.venv, tests/); the host suites run beside it (.test-logs/hosts.log)"
main_status=0
.venv/bin/python -m pytest -q || main_status=$?
echo "== main suite finished ($((SECONDS - start)) s, status $main_status)"
hosts_status=0
wait "$lane2" || hosts_status=$?
cat .test-logs/hosts.log
echo "== host suites finished ($((SECONDS - start)) s, status $hosts_status)"
[ "$main_status" = 0 ] && [ "$hosts_status" = 0 ]
