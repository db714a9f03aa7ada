#!/usr/bin/env bash
# The main job: set up (if needed), then run the embedded quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/dataflex-rl train examples/quickstart.yaml
