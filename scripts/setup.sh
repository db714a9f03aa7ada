#!/usr/bin/env bash
# Create .venv (once) and install dataflex-rl with the engine, tracker and test extras.
# torch is pinned to the CPU wheel by constraints/cpu.txt (an unpinned torch pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.dataflex-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/cpu.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[engine,tasks,tensorboard,wandb,mlflow,dev]"
  touch "$stamp"
fi
