#!/usr/bin/env bash
# examples/dlrm_criteo.py as a job on this machine: 1 master, 2 parameter
# servers, 2 PyTorch trainers (DDP over Gloo), configs/criteo_dlrm.json on
# the Criteo sample in ../shared/data; then the dev split's figures from
# the job's summary. Each trainer serves Prometheus metrics on a free port
# of 127.0.0.1 (the URL is in its log, trainer<r>.log).
#   examples/run_dlrm_criteo.sh [RUN_DIR] [-- extra master flags]
# Needs the build (scripts/build.sh: build/python) and Debian's python3-torch.
# Exits 77 (nothing run) where the Criteo sample is absent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUN_DIR="${1:-$ROOT/run/dlrm_criteo_py}"
shift || true
[ "${1:-}" = "--" ] && shift
CONFIG="$ROOT/configs/criteo_dlrm.json"
DATA="$ROOT/../shared/data/criteo_kaggle_8k/train.tsv"
if [ ! -f "$DATA" ]; then
  echo "SKIPPED: the Criteo sample is not at $DATA (a fresh clone has no ../shared); nothing was trained" >&2
  exit 77
fi
BUILD="${TESSERA_BUILD_DIR:-$ROOT/build}"
if ! ls "$BUILD"/python/tessera/_tessera*.so >/dev/null 2>&1; then
  echo "run_dlrm_criteo: no Python extension in $BUILD/python/tessera: run scripts/build.sh first" >&2
  exit 1
fi
# The trainers' DDP meets in the master's store (tessera.torch.Store): no port of its own.
PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 \
  --config "$CONFIG" --run_dir "$RUN_DIR" --trainer_cmd "$ROOT/examples/dlrm_criteo.py" \
  --trainer_flags "--metrics_port 0" -- "$@"
/usr/bin/python3 -c "
import json, sys
s = json.load(open('$RUN_DIR/summary.json'))
print('dev split:', json.dumps(s.get('eval') or s))"
