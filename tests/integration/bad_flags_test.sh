#!/usr/bin/env bash
# Each role given a bad flag exits 1 at once with a message naming the
# problem: no crash (a server given a mistyped --master died of SIGSEGV, a
# trainer given --blas_threads 0 of a CHECK, a server given --threads 100000
# of an uncaught exception after taking the system's pids), no wait for a
# master that cannot exist, no job
# that fails only after training (a summary file that cannot be written).
# Every run is bounded by `timeout`; nothing listens for them, so none joins
# a job. Then scripts/launch_local.sh with counts that would leave a job
# waiting for members it never starts (the master reads 0 as the config's),
# and each role's --help, which lists its own flags. Prints PASS/FAIL lines; exits non-zero on a failure.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${TESSERA_BUILD_DIR:-$ROOT/build}"
MASTER="$BUILD/master/tessera_master"
PS="$BUILD/ps/tessera_ps"
TRAINER="$BUILD/trainer/tessera_trainer"
for bin in "$MASTER" "$PS" "$TRAINER"; do
  [ -x "$bin" ] || { echo "FAIL: $bin not found; build first (scripts/build.sh)"; exit 1; }
done
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
CONFIG="$ROOT/bench/configs/toy.json"
# A port no one listens on: a run that got past its checks would try to
# register there for --register_timeout_ms and fail with another message.
NOBODY="tcp://127.0.0.1:9"
FAILURES=0
# Runs COMMAND: it must exit with CODE (default 1) and say MESSAGE.
expect() {  # WHAT MESSAGE [CODE] -- COMMAND...
  local what="$1" message="$2" want=1
  shift 2
  if [ "$1" != "--" ]; then want="$1"; shift; fi
  shift
  local out rc
  out="$(timeout 30 "$@" 2>&1)"
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$message" <<<"$out"; then
    echo "PASS: $what"
  else
    echo "FAIL: $what: exit $rc (want $want), want '$message' in:"
    tail -n 5 <<<"$out" | sed 's/^/    /'
    FAILURES=$((FAILURES + 1))
  fi
}
ps_flags=(--insecure --register_timeout_ms 2000)
expect "ps: a master address that is not tcp://" "'notanaddress' is not an address of the form tcp://HOST:PORT" -- \
  "$PS" "${ps_flags[@]}" --master notanaddress
expect "ps: a master port past 65535" "the port is not in 1..65535" -- \
  "$PS" "${ps_flags[@]}" --master tcp://127.0.0.1:99999
expect "ps: no worker threads" "--threads 0: a server serves lookups and pushes on 1 to 1024 threads" -- \
  "$PS" "${ps_flags[@]}" --master "$NOBODY" --threads 0
expect "ps: more threads than help" "--threads 100000: a server serves lookups and pushes on 1 to 1024" -- \
  "$PS" "${ps_flags[@]}" --master "$NOBODY" --threads 100000
expect "ps: a bind port past 65535" "the port is not in 0..65535" -- \
  "$PS" "${ps_flags[@]}" --master "$NOBODY" --bind tcp://127.0.0.1:99999
expect "ps: negative host memory" "--host_bytes -5 is negative" -- \
  "$PS" "${ps_flags[@]}" --master "$NOBODY" --host_bytes -5
trainer_flags=(--insecure --register_timeout_ms 2000 --rank 0 --world 1)
expect "trainer: a master port past 65535" "the port is not in 1..65535" -- \
  "$TRAINER" "${trainer_flags[@]}" --master tcp://127.0.0.1:99999
expect "trainer: no BLAS threads" "--blas_threads 0: at least 1" -- \
  "$TRAINER" "${trainer_flags[@]}" --master "$NOBODY" --blas_threads 0
expect "trainer: a metrics file in a missing folder" "cannot write metrics file $dir/missing/t.jsonl" -- \
  "$TRAINER" "${trainer_flags[@]}" --master "$NOBODY" --metrics_file "$dir/missing/t.jsonl"
expect "trainer: a rank outside the world" "the rank must be in [0, world): rank 2, world 2" -- \
  "$TRAINER" --insecure --master "$NOBODY" --rank 2 --world 2
master_flags=(--insecure --config "$CONFIG" --register_timeout_ms 2000)
expect "master: a bind port past 65535" "the port is not in 0..65535" -- \
  "$MASTER" "${master_flags[@]}" --bind tcp://127.0.0.1:99999
expect "master: a summary file in a missing folder" "cannot write $dir/missing/summary.json" -- \
  "$MASTER" "${master_flags[@]}" --bind tcp://127.0.0.1:0 --summary_file "$dir/missing/summary.json"
expect "master: an endpoint file in a missing folder" "cannot write $dir/missing/endpoint" -- \
  "$MASTER" "${master_flags[@]}" --bind tcp://127.0.0.1:0 --endpoint_file "$dir/missing/endpoint"
# A FIFO stands in for a device (/dev/stdout): were the check gone, the
# rename would replace only this test's FIFO.
mkfifo "$dir/fifo"
expect "master: an endpoint file that is not a regular file" "cannot write $dir/fifo: it exists and is not a regular" -- \
  "$MASTER" "${master_flags[@]}" --bind tcp://127.0.0.1:0 --endpoint_file "$dir/fifo"
expect "master: a negative count of servers" "--num_ps -1 --num_trainers 0: negative" -- \
  "$MASTER" "${master_flags[@]}" --bind tcp://127.0.0.1:0 --num_ps -1
expect "operator: a master address that is not tcp://" "is not an address of the form tcp://HOST:PORT" -- \
  "$MASTER" --insecure --control status --master notanaddress
expect "operator: a command no master knows" "unknown command 'chekpoint' (known: checkpoint, remove_ps)" -- \
  "$MASTER" --insecure --control chekpoint --master "$NOBODY"
for bad in "--ps 0" "--trainers 0" "--timeout_s abc"; do
  # shellcheck disable=SC2086  # the option and its value
  expect "launch_local.sh $bad is refused" "${bad% *} needs a number >= 1, not '${bad#* }'" 2 -- \
    "$ROOT/scripts/launch_local.sh" $bad --config "$CONFIG" --run_dir "$dir/launch" --insecure
done
# --help and -h: the role's own flags, not the 150 of glog, gflags and
# RocksDB's tools that gflags' own --help lists first.
for bin in "$MASTER" "$PS" "$TRAINER" "$BUILD/master/tessera_export"; do
  for flag in --help -h; do
    out="$("$bin" "$flag" 2>&1)"
    rc=$?
    name="$(basename "$bin")"
    if [ "$rc" -eq 0 ] && grep -q "^usage: $name" <<<"$out" && grep -q -- "^    --" <<<"$out" &&
      ! grep -q "block_cache\|alsologtostderr" <<<"$out"; then
      echo "PASS: $name $flag lists its own flags"
    else
      echo "FAIL: $name $flag: exit $rc, $(wc -l <<<"$out") lines:"
      head -n 5 <<<"$out" | sed 's/^/    /'
      FAILURES=$((FAILURES + 1))
    fi
  done
done
[ "$FAILURES" -eq 0 ] || { echo "$FAILURES failure(s)"; exit 1; }
