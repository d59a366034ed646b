#!/usr/bin/env bash
# CTest's examples_ddp_rpc_tutorial_test: with_tessera.py (the PyTorch
# tutorial's program on Tessera's servers) runs 5 epochs to the end: both
# trainers finish their 50 steps and the master ends the job with 0.
# Skipped (77) where /usr/bin/python3 lacks torch.
#   examples/ddp_rpc_tutorial/run_test.sh BUILD_DIR
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD="$(cd "$1" && pwd)"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
  exit 77
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
if ! EPOCHS=5 TESSERA_BUILD_DIR="$BUILD" PYTHONPATH="$BUILD/python" timeout 120 /usr/bin/python3 \
  "$HERE/with_tessera.py" >"$out" 2>&1; then
  tail -40 "$out"
  echo "FAIL: with_tessera.py failed" >&2
  exit 1
fi
for r in 0 1; do
  grep -q "Training done for epoch 4" "$out" || { tail -40 "$out"; echo "FAIL: no trainer finished epoch 4" >&2; exit 1; }
  grep -q "\[master\]   trainer $r: 50 steps" "$out" || { tail -40 "$out"; echo "FAIL: trainer $r did not run 50 steps" >&2; exit 1; }
done
grep "\[master\]   trainer" "$out"
echo PASS
