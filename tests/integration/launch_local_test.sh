#!/usr/bin/env bash
# Tests scripts/launch_local.sh with parameter servers that join and leave a
# running job:
#   a) --add_ps 1 on a running 2-server job: the server registers, the master
#      runs generation 2 on 3 servers, the job finishes and the launcher exits
#      0 with the added server gone; --add_ps on a finished job is refused.
#   b) --max_restarts 3: a server killed (SIGKILL) mid-job is replaced by the
#      launcher, the master recovers; then a trainer killed is started again
#      with its rank, the master recovers again; then the master killed is
#      started again with --recover and takes the job over; the job finishes,
#      the launcher exits 0.
#   c) SIGTERM to the launcher of a job with an added server: every process of
#      the job, the added server included, is gone.
# In a) and b) each trainer runs on CPUs of its own (--trainer_cpus split, the
# default; a restarted trainer on its rank's), the master and servers on all
# of the test's; in c) (--trainer_cpus all) every trainer on all of them. On
# a machine with one CPU the split is checked as skipped.
#
#   tests/integration/launch_local_test.sh
#
# Binaries from $TESSERA_BUILD_DIR (default build/). Takes about 40 s (a minute
# or two on a loaded machine); every wait is bounded. Prints PASS/FAIL lines,
# exits non-zero on a failure. Kills every process it started (by pid) and
# removes its temp dir (KEEP_TMP=1 keeps it).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
LAUNCH="$ROOT/scripts/launch_local.sh"
for bin in master/tessera_master ps/tessera_ps trainer/tessera_trainer; do
  if [ ! -x "$TESSERA_BUILD_DIR/$bin" ]; then
    echo "FAIL: $TESSERA_BUILD_DIR/$bin not found; build first (scripts/build.sh)"
    exit 1
  fi
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/launch_local_test.XXXXXX")"
STARTED=()   # launchers this script started
JOB_PIDS=()  # the processes of the current part's job, as seen while it ran
ALL_PIDS=()  # those of every part
FAILURES=0

# running PID: exists and is not a zombie (an orphan's zombie lingers where
# PID 1 does not reap).
# shellcheck source=../../scripts/common.sh disable=SC1091
source "$ROOT/scripts/common.sh"

# Records the tessera processes of a job: the launcher's children (given its
# pid) and the servers added with --add_ps.
snapshot() {  # DIR [LAUNCHER_PID]
  local pid name want
  if [ -n "${2:-}" ]; then
    for pid in $(pgrep -P "$2" 2>/dev/null); do
      case "$(cat "/proc/$pid/comm" 2>/dev/null)" in tessera_*) remember "$pid" ;; esac
    done
  fi
  if [ -f "$1/added_ps.pids" ]; then
    while read -r name pid; do
      if [ -n "$name" ] && [[ "$pid" =~ ^[0-9]+$ ]]; then remember "$pid"; fi
    done <"$1/added_ps.pids"
  fi
}
remember() {
  [[ " ${JOB_PIDS[*]} " == *" $1 "* ]] || JOB_PIDS+=("$1")
  [[ " ${ALL_PIDS[*]} " == *" $1 "* ]] || ALL_PIDS+=("$1")
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local pid dir
  for dir in "$TMP"/run_*; do [ -d "$dir" ] && snapshot "$dir"; done
  for pid in "${STARTED[@]}"; do running "$pid" && kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 1 50); do
    local any=0
    for pid in "${STARTED[@]}"; do running "$pid" && any=1; done
    [ "$any" -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${STARTED[@]}" "${ALL_PIDS[@]}"; do running "$pid" && kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 130' INT TERM

# shellcheck source=../script_checks.sh
source "$(dirname "$0")/../script_checks.sh"

# Polls a command for up to S seconds.
wait_until() {  # S command...
  local deadline=$((SECONDS + $1))
  shift
  while [ "$SECONDS" -lt "$deadline" ]; do
    "$@" && return 0
    sleep 0.2
  done
  "$@"
}
# shellcheck disable=SC2317  # the predicates run through wait_until
lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
# shellcheck disable=SC2317
log_has() { grep -qF -- "$2" "$1" 2>/dev/null; }
# shellcheck disable=SC2317
gone() { ! running "$1"; }
# shellcheck disable=SC2317
all_gone() {
  local pid
  for pid in "$@"; do running "$pid" && return 1; done
  return 0
}
# Waits for a launcher to exit; sets CODE to its exit code (124: still running).
wait_launcher() {  # PID S
  CODE=124
  wait_until "$2" gone "$1" || return 0
  wait "$1"
  CODE=$?
}

# StatefulSyncJob of tests/integration/test_jobs.h, as JSON.
write_config() {  # FILE STEPS CKPT_DIR
  cat >"$1" <<EOF
{
  "name": "launch_local_test",
  "tables": [
    {"name": "rows", "num_embeddings": 97, "embedding_dim": 6, "feature_names": ["rows_f"],
     "optimizer": {"type": "adagrad", "lr": 0.1}, "sharding_type": "row_wise",
     "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}},
    {"name": "cols", "num_embeddings": 50, "embedding_dim": 7, "feature_names": ["cols_f"],
     "optimizer": {"type": "adam", "lr": 0.01}, "sharding_type": "column_wise",
     "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}},
    {"name": "whole", "num_embeddings": 40, "embedding_dim": 4, "feature_names": ["whole_f"],
     "optimizer": {"type": "rowwise_adagrad", "lr": 0.1}, "sharding_type": "table_wise",
     "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}},
    {"name": "local", "num_embeddings": 20, "embedding_dim": 3, "feature_names": ["local_f"],
     "optimizer": {"type": "sgd", "lr": 0.1}, "sharding_type": "data_parallel",
     "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}}
  ],
  "model": {"num_dense_features": 3, "bottom_mlp": [8, 4], "top_mlp": [8, 1]},
  "data": {"source": "synthetic", "num_examples": 300, "ids_per_bag": 3, "zipf": 0.9},
  "training": {"batch_size": 8, "steps": $2, "dense_optimizer": {"type": "adam", "lr": 0.01},
               "consistency": "sync", "seed": 5, "log_every": 4},
  "checkpoint": {"dir": "$3", "every_steps": 25, "keep": 3},
  "runtime": {"heartbeat_ms": 200, "peer_timeout_ms": 3000}
}
EOF
}

# Starts a 2-server, 2-trainer job in the background; sets LPID.
start_job() {  # NAME STEPS [launcher flags...]
  local name="$1" steps="$2"
  shift 2
  write_config "$TMP/$name.json" "$steps" "$TMP/ckpt_$name"
  "$LAUNCH" --ps 2 --trainers 2 --config "$TMP/$name.json" --run_dir "$TMP/run_$name" --timeout_s 180 "$@" \
    >"$TMP/$name.out" 2>&1 &
  LPID=$!
  STARTED+=("$LPID")
}

# Waits until trainer 0 has done 50 steps (the checkpoint of step 25 is taken).
wait_for_training() {  # NAME
  local dir="$TMP/run_$1"
  if wait_until 90 lines_at_least "$dir/trainer0.jsonl" 50; then
    snapshot "$dir" "$LPID"
    return 0
  fi
  fail "$1: trainer 0 did not reach step 50 within 90 s"
  show "$TMP/$1.out" "$dir/master.log"
  return 1
}

# ---- a) --add_ps on a running job ----
a() {
  local dir="$TMP/run_a" code added_pid
  start_job a 1000
  wait_for_training a || return
  check_trainer_cpus a split
  timeout 60 "$LAUNCH" --run_dir "$dir" --add_ps 1 >"$TMP/a_add.out" 2>&1
  code=$?
  if [ "$code" -eq 0 ] && log_has "$TMP/a_add.out" "started ps2" && log_has "$TMP/a_add.out" "ps2 registered with the master"; then
    pass "a: --add_ps 1 started ps2 and exited 0 once it registered"
  else
    fail "a: --add_ps 1 exited with code $code"
    show "$TMP/a_add.out" "$dir/ps2.log"
  fi
  snapshot "$dir" "$LPID"
  added_pid="$(awk '$1 == "ps2" {print $2}' "$dir/added_ps.pids" 2>/dev/null)"
  if [ -n "$added_pid" ]; then
    pass "a: added_ps.pids records ps2 (pid $added_pid)"
  else
    fail "a: added_ps.pids has no ps2"
  fi
  if wait_until 30 log_has "$dir/master.log" "generation 2: 3 parameter server(s)"; then
    pass "a: master: $(grep -m1 -F "generation 2: 3 parameter server(s)" "$dir/master.log" | sed 's/^.*\] //')"
  else
    fail "a: the master log shows no 'generation 2: 3 parameter server(s)'"
    show "$dir/master.log" "$dir/ps2.log"
  fi
  wait_launcher "$LPID" 150; code=$CODE
  if [ "$code" -eq 0 ]; then
    pass "a: the job finished, the launcher exited 0"
  else
    fail "a: the launcher exited with code $code"
    show "$TMP/a.out" "$dir/master.log" "$dir/ps2.log"
  fi
  if [ -n "$added_pid" ] && ! wait_until 5 gone "$added_pid"; then
    fail "a: the added server (pid $added_pid) still runs after the launcher exited"
  fi
  if wait_until 5 all_gone "${JOB_PIDS[@]}"; then
    pass "a: no process of the job is left"
  else
    fail "a: processes left: $(for p in "${JOB_PIDS[@]}"; do running "$p" && echo -n "$p "; done)"
  fi
  # No job runs there any more: --add_ps is refused.
  timeout 30 "$LAUNCH" --run_dir "$dir" --add_ps 1 >"$TMP/a_add2.out" 2>&1
  code=$?
  if [ "$code" -ne 0 ] && log_has "$TMP/a_add2.out" "no running job"; then
    pass "a: --add_ps on a finished job is refused: $(head -n 1 "$TMP/a_add2.out")"
  else
    fail "a: --add_ps on a finished job exited with code $code"
    show "$TMP/a_add2.out"
  fi
}

# The pids of the launcher's children running binaries $@ (their comm).
children_of_launcher() {
  local pid name want
  for pid in $(pgrep -P "$LPID"); do
    name="$(cat "/proc/$pid/comm" 2>/dev/null)"
    for want in "$@"; do [ "$name" = "$want" ] && echo "$pid"; done
  done
}
# The pid of the launcher's child running binary $1, or nothing.
child_of_launcher() { children_of_launcher "$1" | head -n 1; }

# "PID RANK" of each trainer the launcher runs.
launcher_trainers() {
  local pid
  for pid in $(children_of_launcher tessera_trainer); do
    echo "$pid $(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '/^--rank$/{n;p;q}')"
  done
}
cpus_of() { allowed_cpus_of "$1" | paste -sd, -; }

# The CPUs of each trainer of the launcher (two of them) after --trainer_cpus
# $2: split, each on as many of the test's CPUs as the other and none of the
# other's; all, each on all of them. The master and servers on all of them.
# Sets TRAINER_CPUS_BY_RANK[rank].
TRAINER_CPUS_BY_RANK=()
check_trainer_cpus() {  # PART split|all
  local ours n pid rank cpus list=() union=() others=0 found=0 cpu failed=$FAILURES
  ours="$(cpus_of $$)"
  n="$(allowed_cpus_of $$ | wc -l)"
  TRAINER_CPUS_BY_RANK=()
  while read -r pid rank; do
    [ -n "$pid" ] || continue
    found=$((found + 1))
    mapfile -t list < <(allowed_cpus_of "$pid")
    cpus="$(IFS=,; echo "${list[*]}")"
    TRAINER_CPUS_BY_RANK[rank]="$cpus"
    for cpu in "${list[@]}"; do union[cpu]=1; done
    if [ "$2" = all ] || [ "$n" -lt 2 ]; then
      [ "$cpus" = "$ours" ] || fail "$1: trainer $rank (pid $pid) runs on CPUs $cpus, not all of $ours"
    elif [ "${#list[@]}" -ne $((n / 2)) ]; then
      fail "$1: trainer $rank (pid $pid) runs on ${#list[@]} CPU(s) ($cpus), not $((n / 2)) of $ours"
    fi
  done < <(launcher_trainers)
  for pid in $(children_of_launcher tessera_master tessera_ps); do
    [ "$(cpus_of "$pid")" = "$ours" ] || others=$((others + 1))
  done
  if [ "$FAILURES" -ne "$failed" ]; then
    return
  elif [ "$found" -ne 2 ]; then
    fail "$1: found $found trainer(s) of the launcher, not 2"
  elif [ "$others" -ne 0 ]; then
    fail "$1: $others master or server process(es) do not run on all of the CPUs $ours"
  elif [ "$2" = split ] && [ "$n" -lt 2 ]; then
    echo "SKIP: $1: one CPU ($ours): the trainers share it, as --trainer_cpus split does there"
  elif [ "$2" = split ] && [ "${#union[@]}" -ne $((2 * (n / 2))) ]; then
    fail "$1: the trainers' CPUs overlap: ${TRAINER_CPUS_BY_RANK[*]}"
  else
    pass "$1: --trainer_cpus $2: trainer 0 on CPUs ${TRAINER_CPUS_BY_RANK[0]:-?}, trainer 1 on ${TRAINER_CPUS_BY_RANK[1]:-?}, the master and servers on $ours"
  fi
}

# Kills the launcher's child running binary $1 with SIGKILL; its pid in
# $victim. Fails the part when there is none.
kill_child() {
  victim="$(child_of_launcher "$1")"
  if [ -z "$victim" ]; then
    fail "b: found no $1 child of the launcher"
    return 1
  fi
  kill -KILL "$victim"
}

# shellcheck disable=SC2317  # called through wait_until
trainers_running() { [ "$(launcher_trainers | wc -l)" -eq "$1" ]; }
# shellcheck disable=SC2317  # called through wait_until
recovered_twice() { [ "$(grep -c -F "[master] recovered" "$1")" -ge 2 ]; }

# ---- b) --max_restarts: a killed server, then a killed trainer, replaced ----
b() {
  local dir="$TMP/run_b" code victim=""
  start_job b 3000 --max_restarts 3
  wait_for_training b || return
  check_trainer_cpus b split
  local before=("${TRAINER_CPUS_BY_RANK[@]}")
  kill_child tessera_ps || return
  if wait_until 15 log_has "$TMP/b.out" "exited with code 137; started ps2 in its place (restart 1 of 3)"; then
    pass "b: $(grep -m1 -F "started ps2 in its place" "$TMP/b.out")"
  else
    fail "b: the launcher did not restart the killed server (pid $victim)"
    show "$TMP/b.out"
  fi
  snapshot "$dir" "$LPID"
  if wait_until 60 log_has "$dir/master.log" "[master] recovered"; then
    pass "b: master: $(grep -m1 -F "[master] recovered" "$dir/master.log")"
  else
    fail "b: the master log shows no '[master] recovered'"
    show "$dir/master.log" "$dir/ps2.log"
  fi
  kill_child tessera_trainer || return
  if wait_until 15 log_has "$TMP/b.out" "exited with code 137; started trainer"; then
    pass "b: $(grep -m1 -F "started trainer" "$TMP/b.out")"
  else
    fail "b: the launcher did not restart the killed trainer (pid $victim)"
    show "$TMP/b.out"
  fi
  # The new trainer runs with its rank, on the CPUs its rank had.
  if wait_until 10 trainers_running 2; then
    check_trainer_cpus b split
    if [ "${TRAINER_CPUS_BY_RANK[*]}" = "${before[*]}" ]; then
      pass "b: the restarted trainer runs on its rank's CPUs"
    else
      fail "b: the trainers' CPUs by rank were ${before[*]}, after the restart ${TRAINER_CPUS_BY_RANK[*]}"
    fi
  else
    fail "b: the launcher does not run two trainers after the restart"
  fi
  snapshot "$dir" "$LPID"
  if wait_until 60 recovered_twice "$dir/master.log"; then
    pass "b: master: $(grep -F "[master] lost trainer" "$dir/master.log" | cut -c1-120)"
  else
    fail "b: the master log shows no second '[master] recovered'"
    show "$dir/master.log" "$TMP/b.out"
  fi
  kill_child tessera_master || return
  if wait_until 15 log_has "$TMP/b.out" "started a master on"; then
    pass "b: $(grep -m1 -F "started a master on" "$TMP/b.out" | cut -c1-140)"
  else
    fail "b: the launcher did not restart the killed master (pid $victim)"
    show "$TMP/b.out"
  fi
  snapshot "$dir" "$LPID"
  if wait_until 60 log_has "$dir/master.restart3.log" "[master] took the job over"; then
    pass "b: new master: $(grep -m1 -F "[master] took the job over" "$dir/master.restart3.log" | cut -c1-120)"
  else
    fail "b: the new master did not take the job over"
    show "$dir/master.restart3.log" "$TMP/b.out"
  fi
  wait_launcher "$LPID" 150; code=$CODE
  if [ "$code" -eq 0 ]; then
    pass "b: the job finished after the restarts, the launcher exited 0"
  else
    fail "b: the launcher exited with code $code"
    show "$TMP/b.out" "$dir/master.log" "$dir/ps2.log"
  fi
  if wait_until 5 all_gone "${JOB_PIDS[@]}"; then
    pass "b: no process of the job is left"
  else
    fail "b: processes left: $(for p in "${JOB_PIDS[@]}"; do running "$p" && echo -n "$p "; done)"
  fi
}

# ---- c) SIGTERM to the launcher stops everything, added servers too ----
c() {
  local dir="$TMP/run_c" code
  start_job c 100000 --trainer_cpus all
  wait_for_training c || return
  check_trainer_cpus c all
  if ! timeout 60 "$LAUNCH" --run_dir "$dir" --add_ps 1 >"$TMP/c_add.out" 2>&1; then
    fail "c: --add_ps 1 failed"
    show "$TMP/c_add.out"
  fi
  snapshot "$dir" "$LPID"
  kill -TERM "$LPID"
  wait_launcher "$LPID" 30; code=$CODE
  if [ "$code" -ne 0 ] && [ "$code" -ne 124 ]; then
    pass "c: the launcher stopped on SIGTERM (exit code $code)"
  else
    fail "c: the launcher's exit code after SIGTERM: $code"
    show "$TMP/c.out"
  fi
  if [ ${#JOB_PIDS[@]} -ge 6 ] && wait_until 10 all_gone "${JOB_PIDS[@]}"; then
    pass "c: all ${#JOB_PIDS[@]} processes of the job are gone, the added server included"
  else
    fail "c: processes left (of ${#JOB_PIDS[@]}): $(for p in "${JOB_PIDS[@]}"; do running "$p" && echo -n "$p "; done)"
  fi
}

JOB_PIDS=(); a
JOB_PIDS=(); b
JOB_PIDS=(); c
if [ "$FAILURES" -eq 0 ]; then
  echo "PASS: launch_local_test"
  exit 0
fi
echo "FAIL: launch_local_test ($FAILURES failure(s))"
exit 1
