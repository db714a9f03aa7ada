#!/usr/bin/env bash
# Create .venv (once) and install dataflex-rl.
#   bash scripts/setup.sh        what the quickstart needs: the engine and task extras
#   bash scripts/setup.sh test   also the test tools, every tracker and Debian's Chromium for the
#                                browser test of report.html (what scripts/test.sh runs)
# torch is pinned to the CPU wheel by constraints/cpu.txt (an unpinned torch pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") extras="engine,tasks"; stamps=(.venv/.dataflex-installed .venv/.dataflex-installed-test) ;;
  test) extras="engine,tasks,tensorboard,wandb,mlflow,ray,dev"; stamps=(.venv/.dataflex-installed-test) ;;
  *) echo "usage: bash scripts/setup.sh [test]" >&2; exit 2 ;;
esac
if [ "${1:-}" = test ]; then
  bash scripts/setup_browser.sh  # skipped when /usr/bin/chromium and chromedriver run
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ] && [ ! constraints/cpu.txt -nt "$1" ]; }
for stamp in "${stamps[@]}"; do
  if fresh "$stamp"; then exit 0; fi  # installed since the last change (a test setup covers both)
done
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[$extras]"
touch "${stamps[0]}"
