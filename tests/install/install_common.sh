# shellcheck shell=bash
# Shared by tests/install/install_test.sh and deb_test.sh: a temp dir, the
# PASS/FAIL lines, the installed quickstart and the consumer project.
# Sets ROOT, TMP (removed at exit; KEEP_TMP=1 keeps it) and FAILURES; at
# exit ends the quickstart if it still runs, then runs the function named by
# EXTRA_CLEANUP, if any.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TINY_JOB="$ROOT/tests/install/tiny_job.json"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")"
JOB_PID=""
FAILURES=0
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ -n "$JOB_PID" ] && kill -0 "$JOB_PID" 2>/dev/null; then
    kill -TERM "$JOB_PID" 2>/dev/null  # the launcher ends the job's processes
    for _ in $(seq 1 50); do kill -0 "$JOB_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$JOB_PID" 2>/dev/null
  fi
  wait 2>/dev/null
  if [ -n "${EXTRA_CLEANUP:-}" ]; then "$EXTRA_CLEANUP"; fi
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 130' INT TERM

# shellcheck source=../script_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../script_checks.sh"
finish() {  # NAME: the summary line and the exit code
  if [ "$FAILURES" -eq 0 ]; then echo "$1: all passed"; else echo "$1: $FAILURES failure(s)"; fi
  [ "$FAILURES" -eq 0 ]
}

# Part PART: runs the installed quickstart QUICKSTART (with ARGS) from a
# folder outside the checkout, with neither TESSERA_BUILD_DIR nor
# TESSERA_BIN_DIR (the scripts must find the installed programs themselves),
# logging to $TMP/run; passes when it exits 0 with the master's "job NAME
# finished".
quickstart_part() {  # PART NAME QUICKSTART [ARGS...]
  local part="$1" name="$2" quickstart="$3" code line
  shift 2
  mkdir -p "$TMP/cwd"
  (cd "$TMP/cwd" && exec env -u TESSERA_BUILD_DIR -u TESSERA_BIN_DIR TESSERA_JOB_TIMEOUT_S=60 \
    timeout -k 5 90 "$@" --run_dir "$TMP/run") >"$TMP/quickstart.out" 2>&1 &
  JOB_PID=$!
  wait "$JOB_PID"
  code=$?
  JOB_PID=""
  if [ "$code" -eq 0 ] &&
    line="$(grep -h -m1 "\[master\] job '$name' finished" "$TMP/run/master.log" 2>/dev/null | grep .)"; then
    pass "$part: $quickstart ran the job: ${line#*\] }"
  else
    fail "$part: $quickstart exited with code $code"
    show "$TMP/quickstart.out" "$TMP/run/master.log" "$TMP/run/trainer0.log" "$TMP/run/ps0.log"
  fi
}

# Configures tests/install/consumer with CMAKE_ARGS, checks that it found the
# package in CMAKE_DIR, builds it and runs it on tiny_job.json; output in
# $TMP/consumer.out. Shows what failed.
build_consumer() {  # CMAKE_DIR [CMAKE_ARGS...]
  local cmake_dir="$1"
  shift
  timeout 60 cmake -S "$ROOT/tests/install/consumer" -B "$TMP/consumer" -DCMAKE_BUILD_TYPE=Release "$@" \
    >"$TMP/consumer_configure.out" 2>&1 || { show "$TMP/consumer_configure.out"; return 1; }
  grep -F -q "from $cmake_dir" "$TMP/consumer_configure.out" ||
    { echo "    found no Tessera package in $cmake_dir:"; show "$TMP/consumer_configure.out"; return 1; }
  timeout 120 cmake --build "$TMP/consumer" -j2 >"$TMP/consumer_build.out" 2>&1 ||
    { show "$TMP/consumer_build.out"; return 1; }
  timeout 30 "$TMP/consumer/consumer" "$TINY_JOB" >"$TMP/consumer.out" 2>&1 || { show "$TMP/consumer.out"; return 1; }
  if ! grep -F -q "consumer: job 'install_test_job': 2 table(s)" "$TMP/consumer.out" ||
    ! grep -F -q "consumer: a broken config: INVALID_ARGUMENT" "$TMP/consumer.out"; then
    show "$TMP/consumer.out"
    return 1
  fi
}
