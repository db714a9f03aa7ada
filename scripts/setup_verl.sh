#!/usr/bin/env bash
# Create .venv-verl (once) with verl 0.9.1 and dataflex-rl, for the verl host tests (tests/hosts/).
# A separate venv keeps the main one lean (verl pulls ray, transferqueue, hydra, ... about 1.9 GB).
# torch stays the CPU wheel pinned by constraints/cpu.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-verl/bin/python ]; then
  python3 -m venv .venv-verl
fi
stamp=.venv-verl/.dataflex-verl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/cpu.txt -nt "$stamp" ] \
    || [ "$0" -nt "$stamp" ]; then
  .venv-verl/bin/python -m pip install -q --upgrade pip
  .venv-verl/bin/python -m pip install -q -c constraints/cpu.txt "verl[verl-core]==0.9.1"
  .venv-verl/bin/python -m pip install -q -c constraints/cpu.txt -e ".[dev]"
  touch "$stamp"
fi
