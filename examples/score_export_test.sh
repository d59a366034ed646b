#!/usr/bin/env bash
# CTest's examples_score_export_test: a trained model leaves Tessera and is
# scored in plain PyTorch with the same AUC. configs/criteo_dlrm.json trains
# 101 steps on the Criteo sample with a checkpoint at step 100; a second job
# resumes it and, training no further, evaluates the dev split (its own
# figure: summary.json's eval.auc); tessera_export writes the checkpoint and
# examples/score_export.py must reach that AUC within 1e-6.
# Skipped (77) where the sample or torch is absent. TESSERA_EXPORT_PYTHON
# names the interpreter (default /usr/bin/python3); without safetensors
# there the export is npy (numpy).
#   examples/score_export_test.sh BUILD_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
export TESSERA_BUILD_DIR="$BUILD"
PY="${TESSERA_EXPORT_PYTHON:-/usr/bin/python3}"
DATA="$ROOT/../shared/data/criteo_kaggle_8k"
if [ ! -f "$DATA/train.tsv" ] || [ ! -f "$DATA/dev.tsv" ]; then
  echo "SKIPPED: the Criteo sample is not at $DATA"
  exit 77
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "SKIPPED: $PY cannot import torch (apt-get install python3-torch, or TESSERA_EXPORT_PYTHON=a venv's python)"
  exit 77
fi
FORMAT=safetensors
if ! "$PY" -c "import safetensors" 2>/dev/null; then
  FORMAT=npy
  "$PY" -c "import numpy" 2>/dev/null || { echo "SKIPPED: $PY has neither safetensors nor numpy"; exit 77; }
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The job's config with absolute data paths, a step count and a checkpoint.
job() {
  /usr/bin/python3 - "$ROOT/configs/criteo_dlrm.json" "$DATA" "$WORK/ckpt" "$1" "$2" <<'PYEOF'
import json, sys
config, data, ckpt, steps, out = sys.argv[1:]
c = json.load(open(config))
c["data"]["path"], c["data"]["eval_path"] = data + "/train.tsv", data + "/dev.tsv"
c["training"]["steps"] = int(steps)
c["checkpoint"] = {"dir": ckpt, "every_steps": 100, "keep": 1}
json.dump(c, open(out, "w"))
PYEOF
}
job 101 "$WORK/a.json"
job 100 "$WORK/b.json"
run() {  # run NAME CONFIG [master flags]
  local name="$1" config="$2"
  shift 2
  timeout 300 "$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 --config "$config" --run_dir "$WORK/$name" \
    --insecure -- "$@" >"$WORK/$name.out" 2>&1 || { tail -30 "$WORK/$name.out"; echo "FAIL: job $name failed" >&2; exit 1; }
}
run train "$WORK/a.json"
run evaluate "$WORK/b.json" --resume
AUC="$(/usr/bin/python3 -c "import json, sys; print(repr(json.load(open(sys.argv[1]))['eval']['auc']))" "$WORK/evaluate/summary.json")"
"$BUILD/master/tessera_export" --checkpoint "$WORK/ckpt" --format "$FORMAT" --out "$WORK/export"
"$PY" "$ROOT/examples/score_export.py" "$WORK/export" "$DATA/dev.tsv" --expect_auc "$AUC"
