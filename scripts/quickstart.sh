#!/usr/bin/env bash
# Installs what is missing, builds, and trains the DLRM-style model on the
# Criteo sample (../shared/data; synthetic data when absent) with 1 master,
# 2 parameter servers and 2 trainers on 127.0.0.1. Prints the loss falling.
#   scripts/quickstart.sh [--config job.json] [--run_dir DIR]
# --config trains that job instead, as it is. Installed (cmake --install, the
# .deb: bin/tessera-quickstart) it builds nothing and runs the installed
# programs, logging to ./tessera-quickstart unless told otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONFIG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --run_dir) RUN_DIR="$2"; shift 2 ;;
    -h|--help) source "$ROOT/scripts/common.sh"; tessera_usage "$0"; exit 0 ;;
    *) echo "usage: $0 [--config job.json] [--run_dir DIR]" >&2; exit 2 ;;
  esac
done
if [ -f "$ROOT/scripts/install_layout.sh" ]; then
  RUN_DIR="${RUN_DIR:-$PWD/tessera-quickstart}"
else
  "$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer
  RUN_DIR="${RUN_DIR:-$ROOT/run/quickstart}"
fi
DATA="$ROOT/../shared/data/criteo_kaggle_8k/train.tsv"
if [ -z "$CONFIG" ] && [ ! -f "$DATA" ]; then
  CONFIG="$ROOT/configs/criteo_dlrm.json"
  # A fresh clone has no ../shared: the same job on synthetic data, said
  # loudly (the shipped config itself never falls back silently).
  mkdir -p "$RUN_DIR"
  python3 - "$CONFIG" "$RUN_DIR/job.json" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
base = os.path.dirname(os.path.abspath(sys.argv[1]))
for k in ("path", "eval_path"):
    if k in c["data"]:
        c["data"][k] = os.path.normpath(os.path.join(base, c["data"][k]))
c["data"]["fallback_to_synthetic"] = True
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  CONFIG="$RUN_DIR/job.json"
  echo "==================================================================================="
  echo "== NO CRITEO DATA at $DATA:"
  echo "== this quickstart trains on SYNTHETIC data with the same features instead."
  echo "==================================================================================="
fi
CONFIG="${CONFIG:-$ROOT/configs/criteo_dlrm.json}"
echo "== Tessera quickstart: 1 master, 2 parameter servers, 2 trainers; logs in $RUN_DIR"
"$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 --config "$CONFIG" --run_dir "$RUN_DIR"
echo "== done: per-step metrics in $RUN_DIR/trainer0.jsonl and trainer1.jsonl, summary in $RUN_DIR/summary.json"
