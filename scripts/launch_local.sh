#!/usr/bin/env bash
# Runs a whole job on this machine: 1 master, N parameter servers, M trainers,
# all on 127.0.0.1.
#
#   scripts/launch_local.sh --ps N --trainers M --config job.json --run_dir DIR
#       [--ps_flags "FLAGS"] [--trainer_flags "FLAGS"] [--timeout_s S] [-- extra master flags]
#
# --ps_flags go to every parameter server; {i} in them becomes the server's
# index, e.g. --ps_flags "--host_bytes 64000000 --rocksdb_path DIR/rocks{i}".
# --trainer_flags go to every trainer ({r}: its rank), e.g. "--device cuda:{r}".
# The binaries come from $TESSERA_BUILD_DIR (default build/), or all from one
# folder with TESSERA_BIN_DIR (a GPU bundle's bin/).
#
# DIR receives master.log, ps<i>.log, trainer<r>.log, trainer<r>.jsonl (per-step
# metrics) and summary.json. The master's progress lines are echoed here.
# Exits non-zero if any process failed; leaves no process behind either way.
set -uo pipefail
source "$(dirname "$0")/common.sh"

NUM_PS=1
NUM_TRAINERS=1
CONFIG=""
RUN_DIR=""
TIMEOUT_S="${TESSERA_JOB_TIMEOUT_S:-3600}"
MASTER_EXTRA=()
PS_FLAGS=""
TRAINER_FLAGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ps) NUM_PS="$2"; shift 2 ;;
    --trainers) NUM_TRAINERS="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --run_dir) RUN_DIR="$2"; shift 2 ;;
    --timeout_s) TIMEOUT_S="$2"; shift 2 ;;
    --ps_flags) PS_FLAGS="$2"; shift 2 ;;
    --trainer_flags) TRAINER_FLAGS="$2"; shift 2 ;;
    --) shift; MASTER_EXTRA=("$@"); break ;;
    *) echo "launch_local: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$CONFIG" ] || [ -z "$RUN_DIR" ]; then
  echo "usage: $0 --ps N --trainers M --config job.json --run_dir DIR [--ps_flags F] [--trainer_flags F] [--timeout_s S] [-- master flags]" >&2
  exit 2
fi
MASTER_BIN="$(tessera_bin tessera_master)" || exit 1
PS_BIN="$(tessera_bin tessera_ps)" || exit 1
TRAINER_BIN="$(tessera_bin tessera_trainer)" || exit 1
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
rm -f "$RUN_DIR"/master.endpoint "$RUN_DIR"/*.log "$RUN_DIR"/*.jsonl "$RUN_DIR"/summary.json

PIDS=()
NAMES=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 0.5
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  [ -n "${TAIL_PID:-}" ] && kill "$TAIL_PID" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'echo "launch_local: interrupted" >&2; exit 130' INT TERM

"$MASTER_BIN" --config "$CONFIG" --bind tcp://127.0.0.1:0 --endpoint_file "$RUN_DIR/master.endpoint" \
  --num_ps "$NUM_PS" --num_trainers "$NUM_TRAINERS" --summary_file "$RUN_DIR/summary.json" \
  "${MASTER_EXTRA[@]}" >"$RUN_DIR/master.log" 2>&1 &
MASTER_PID=$!
PIDS+=("$MASTER_PID"); NAMES+=("master")

for _ in $(seq 1 300); do
  [ -s "$RUN_DIR/master.endpoint" ] && break
  if ! kill -0 "$MASTER_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ ! -s "$RUN_DIR/master.endpoint" ]; then
  echo "launch_local: the master did not start; see $RUN_DIR/master.log:" >&2
  tail -n 20 "$RUN_DIR/master.log" >&2
  exit 1
fi
MASTER="$(cat "$RUN_DIR/master.endpoint")"

tail -n +1 -f "$RUN_DIR/master.log" 2>/dev/null | grep --line-buffered -E '^\[master\]|^Sharding plan|^param|^t_|^bytes per' &
TAIL_PID=$!

for i in $(seq 0 $((NUM_PS - 1))); do
  # shellcheck disable=SC2086  # the flags are meant to split into words
  "$PS_BIN" --master "$MASTER" ${PS_FLAGS//\{i\}/$i} >"$RUN_DIR/ps$i.log" 2>&1 &
  PIDS+=("$!"); NAMES+=("ps$i")
done
for r in $(seq 0 $((NUM_TRAINERS - 1))); do
  # shellcheck disable=SC2086  # the flags are meant to split into words
  "$TRAINER_BIN" --master "$MASTER" --rank "$r" --world "$NUM_TRAINERS" \
    --metrics_file "$RUN_DIR/trainer$r.jsonl" ${TRAINER_FLAGS//\{r\}/$r} >"$RUN_DIR/trainer$r.log" 2>&1 &
  PIDS+=("$!"); NAMES+=("trainer$r")
done

# The master decides when the job ends (done, or failed with a reason).
DEADLINE=$((SECONDS + TIMEOUT_S))
while kill -0 "$MASTER_PID" 2>/dev/null; do
  if [ $SECONDS -ge $DEADLINE ]; then
    echo "launch_local: job exceeded ${TIMEOUT_S}s; stopping it" >&2
    kill -TERM "$MASTER_PID" 2>/dev/null
    sleep 5
    break
  fi
  sleep 0.2
done

# Give the others a moment to finish on their own, then collect exit codes.
FAILED=0
for idx in "${!PIDS[@]}"; do
  pid="${PIDS[$idx]}"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "launch_local: ${NAMES[$idx]} (pid $pid) still running after the master ended; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    FAILED=1
  fi
  wait "$pid"
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "launch_local: ${NAMES[$idx]} exited with code $code (log: $RUN_DIR/${NAMES[$idx]}.log)" >&2
    FAILED=1
  fi
done
sleep 0.3
exit $FAILED
