#!/usr/bin/env bash
# Create .venv-trl (once) with TRL 1.16 and dataflex-rl, for the TRL host tests (tests/hosts_trl/).
# TRL 1.16 needs a newer transformers than verl 0.9.1 allows (and than the engine extra caps), so
# the TRL host gets its own venv. torch stays the CPU wheel pinned by constraints/cpu.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-trl/bin/python ]; then
  python3 -m venv .venv-trl
fi
stamp=.venv-trl/.dataflex-trl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/cpu.txt -nt "$stamp" ] \
    || [ "$0" -nt "$stamp" ]; then
  .venv-trl/bin/python -m pip install -q --upgrade pip
  .venv-trl/bin/python -m pip install -q -c constraints/cpu.txt -e ".[trl,dev]"
  touch "$stamp"
fi
