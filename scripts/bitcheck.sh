#!/usr/bin/env bash
# Fingerprints of engine runs, for checking that a refactor changes no result:
#   bash scripts/bitcheck.sh > after.txt    (then the same on the base commit, and diff the two)
# Prints the parameter_sha256 and a sha256 over every checkpoint tensor of a 4-step quickstart
# (baseline, difffilter), and the sha256 of results.csv / statistics.csv of a 3-step
# configs/experiments/quick.yaml compare. About a minute on one core.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1
$py -m dataflex_rl.cli train examples/quickstart.yaml --steps 4 --out "$out/qs" --no-progress \
  --workers 1 >"$out/train.log" 2>&1 || { cat "$out/train.log"; exit 1; }
for s in baseline difffilter; do
  # tensor contents: a safetensors file's bytes vary with its header's key order
  $py - "$out/qs/$s" <<'PY'
import hashlib
import json
import pathlib
import sys

from safetensors import safe_open

run = pathlib.Path(sys.argv[1])
h = hashlib.sha256()
for path in sorted(run.rglob("*.safetensors")):
    f = safe_open(str(path), "pt")
    for key in sorted(f.keys()):
        h.update(path.name.encode() + key.encode())
        h.update(f.get_tensor(key).contiguous().numpy().tobytes())
summary = json.loads((run / "summary.json").read_text())
print(run.name, "parameter_sha256", summary["parameter_sha256"])
print(run.name, "checkpoint tensors", h.hexdigest())
PY
done
$py -m dataflex_rl.cli compare configs/experiments/quick.yaml budget.steps=3 --out "$out/cmp" \
  --no-progress --no-plots --workers 1 >"$out/cmp.log" 2>&1 || { cat "$out/cmp.log"; exit 1; }
for f in results.csv statistics.csv; do
  echo "$f $(sha256sum <"$(find "$out/cmp" -name "$f" | head -1)" | cut -c1-64)"
done
