#!/usr/bin/env bash
# Installs what is missing, builds, and trains the DLRM-style model on the
# Criteo sample (../shared/data; synthetic data when absent) with 1 master,
# 2 parameter servers and 2 trainers on 127.0.0.1. Prints the loss falling.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer
RUN_DIR="${RUN_DIR:-$ROOT/run/quickstart}"
echo "== Tessera quickstart: 1 master, 2 parameter servers, 2 trainers; logs in $RUN_DIR"
"$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 --config "$ROOT/configs/criteo_dlrm.json" --run_dir "$RUN_DIR"
echo "== done: per-step metrics in $RUN_DIR/trainer0.jsonl and trainer1.jsonl, summary in $RUN_DIR/summary.json"
