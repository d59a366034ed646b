#!/usr/bin/env bash
# Runs a whole job on this machine: 1 master, N parameter servers, M trainers,
# all on 127.0.0.1; or adds parameter servers to a job it is running.
#
#   scripts/launch_local.sh --ps N --trainers M --config job.json --run_dir DIR
#       [--ps_flags "FLAGS"] [--trainer_flags "FLAGS"] [--trainer_cmd CMD] [--timeout_s S]
#       [--max_restarts R] [--trainer_cpus split|all] [--keys KEYS | --insecure] [-- extra master flags]
#   scripts/launch_local.sh --run_dir DIR --add_ps N [--ps_flags "FLAGS"]
#
# --ps_flags go to every parameter server; {i} in them becomes the server's
# index, e.g. --ps_flags "--host_bytes 64000000 --rocksdb_path DIR/rocks{i}".
# --trainer_flags go to every trainer ({r}: its rank), e.g. "--device cuda:{r}".
# --trainer_cmd runs CMD as each trainer instead of tessera_trainer, with the
# same arguments (--master, --keys or --insecure, --rank, --world,
# --metrics_file, then --trainer_flags): a PyTorch trainer such as
# examples/dlrm_criteo.py (docs/python.md). It runs with OPENBLAS_CORETYPE
# set to the OpenBLAS kernels tessera_trainer runs on (unless already set).
# The binaries come from $TESSERA_BUILD_DIR (default build/), or all from one
# folder with TESSERA_BIN_DIR (a GPU bundle's bin/).
#
# --trainer_cpus split (the default) gives each trainer CPUs of its own: the
# CPUs this script may run on, in equal shares by rank (taskset), where there
# are at least as many as trainers; the master and the servers run on all of
# them: unpinned, two trainers' models at times queue on one CPU while the
# other runs a server or sits idle (on two cores W1 ran a median 1.08x as
# fast pinned, W2 1.02-1.05x; bench/README.md, "Each trainer on its own
# CPU"). --trainer_cpus all lets every trainer run on every CPU.
#
# Every role gets the job's keys (CURVE: encrypted, and only the job's own
# processes may connect): new ones written to DIR/keys for each job, or the
# folder given with --keys. --insecure runs on plain TCP instead, which
# anyone who can reach the ports may talk to. --add_ps uses what the job uses.
#
# DIR receives master.log, ps<i>.log, trainer<r>.log, trainer<r>.jsonl (per-step
# metrics) and summary.json; while the job runs also master.endpoint and
# master.pid. The master's progress lines are echoed here.
# Exits non-zero if any process failed; leaves no process behind either way.
#
# --max_restarts R (default 0; like torchrun's --max-restarts): a process of
# the job that dies is started again, at most R times in all:
#   - a parameter server or trainer that exits non-zero or is killed while the
#     master runs. A server comes back as a new one (the next free index, the
#     same --ps_flags): the master rolls the job back to its newest checkpoint
#     and adds it. A trainer comes back with the same rank (log
#     trainer<r>.restart<k>.log, metrics appended to trainer<r>.jsonl): the
#     master rolls the job back and the trainers rebuild their collective.
#   - the master, when a signal killed it: a new one starts on the same
#     address with --recover (log master.restart<k>.log); the servers and
#     trainers, which keep retrying the address for
#     runtime.master_reconnect_ms, register with it and the job goes on from
#     its newest checkpoint.
# A replaced process does not by itself make this script fail: the last
# master's exit code says whether the job recovered. Not restarted: a process
# that exits 2 (the master told it the job was aborted, or that it was
# replaced), a master that exits by itself (the job ended, well or not), and
# servers added with --add_ps (their exit codes cannot be seen).
# --add_ps N, on a job this script is running in DIR (no --config): starts N
# more servers, detached from this invocation (setsid), that register with the
# job's master (address from DIR/master.endpoint) and are added at the next
# step boundary, where the rows they take over are sent to them by the servers
# that hold them. They are named with the next free index (ps<k>.log in DIR, {i}
# in --ps_flags becoming k) and recorded in DIR/added_ps.pids ("name pid" per
# line), which the script running the job reads to stop and wait for them as
# its own. Exits 0 once every new server has registered; non-zero, with the log's
# tail, if one exits first or 30 s pass (the servers not yet registered are
# then stopped).
set -uo pipefail
# shellcheck source=SCRIPTDIR/common.sh disable=SC1091  # followed with shellcheck -x
source "$(dirname "$0")/common.sh"

NUM_PS=1
NUM_TRAINERS=1
CONFIG=""
RUN_DIR=""
TIMEOUT_S="${TESSERA_JOB_TIMEOUT_S:-3600}"
MASTER_EXTRA=()
PS_FLAGS=""
TRAINER_FLAGS=""
MAX_RESTARTS=0
TRAINER_CPUS="split"
TRAINER_CMD=""
ADD_PS=""
KEYS=""
INSECURE=0
JOB_ARGS=0  # arguments that only the normal mode takes
while [ $# -gt 0 ]; do
  case "$1" in
    --ps) NUM_PS="$2"; JOB_ARGS=1; shift 2 ;;
    --trainers) NUM_TRAINERS="$2"; JOB_ARGS=1; shift 2 ;;
    --config) CONFIG="$2"; JOB_ARGS=1; shift 2 ;;
    --run_dir) RUN_DIR="$2"; shift 2 ;;
    --timeout_s) TIMEOUT_S="$2"; JOB_ARGS=1; shift 2 ;;
    --ps_flags) PS_FLAGS="$2"; shift 2 ;;
    --trainer_flags) TRAINER_FLAGS="$2"; JOB_ARGS=1; shift 2 ;;
    --trainer_cmd) TRAINER_CMD="$2"; JOB_ARGS=1; shift 2 ;;
    --max_restarts) MAX_RESTARTS="$2"; JOB_ARGS=1; shift 2 ;;
    --trainer_cpus) TRAINER_CPUS="$2"; JOB_ARGS=1; shift 2 ;;
    --add_ps) ADD_PS="$2"; shift 2 ;;
    --keys) KEYS="$2"; JOB_ARGS=1; shift 2 ;;
    --insecure) INSECURE=1; JOB_ARGS=1; shift ;;
    --) shift; MASTER_EXTRA=("$@"); JOB_ARGS=1; break ;;
    -h|--help) tessera_usage "$0"; exit 0 ;;
    *) echo "launch_local: unknown argument $1 (--help says what it takes)" >&2; exit 2 ;;
  esac
done
usage() {
  echo "usage: $0 --ps N --trainers M --config job.json --run_dir DIR [--ps_flags F] [--trainer_flags F] [--trainer_cmd CMD] [--timeout_s S] [--max_restarts R] [--trainer_cpus split|all] [--keys KEYS | --insecure] [-- master flags]" >&2
  echo "       $0 --run_dir DIR --add_ps N [--ps_flags F]" >&2
  exit 2
}
is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }

# The CPUs this script may run on (its affinity: the machine's, or what a
# cgroup, taskset or SLURM left it), one per line, ordered by socket and
# core, so that a core's hyperthreads are neighbours and an equal share of the
# list is whole cores wherever it can be.
allowed_cpus() {
  local allowed=() cpu
  for cpu in $(allowed_cpus_of $$); do allowed[cpu]=1; done
  [ ${#allowed[@]} -gt 0 ] || return 1
  if lscpu -p=CPU,CORE,SOCKET >/dev/null 2>&1; then
    lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | sort -t, -k3,3n -k2,2n -k1,1n | cut -d, -f1 |
      while read -r cpu; do [ -n "${allowed[cpu]:-}" ] && echo "$cpu"; done
  else
    printf '%s\n' "${!allowed[@]}"
  fi
}


# Claims the next free server index in RUN_DIR by creating its log file
# exclusively (noclobber), so that a restart here and an --add_ps elsewhere
# never take the same index. Prints the index.
claim_ps_index() {
  local k=0
  while [ $k -lt 100000 ]; do
    if (set -C; : >"$RUN_DIR/ps$k.log") 2>/dev/null; then
      echo "$k"
      return 0
    fi
    if [ ! -e "$RUN_DIR/ps$k.log" ]; then
      echo "launch_local: cannot create $RUN_DIR/ps$k.log" >&2
      return 1
    fi
    k=$((k + 1))
  done
  return 1
}

# The servers --add_ps started for the job in RUN_DIR: "name pid" per line.
added_servers() {
  [ -f "$RUN_DIR/added_ps.pids" ] || return 0
  local name pid
  while read -r name pid _; do
    if [ -n "$name" ] && is_count "${pid:-}"; then echo "$name $pid"; fi
  done <"$RUN_DIR/added_ps.pids"
}

if [ -n "$ADD_PS" ]; then
  # ---- --add_ps: more servers for a running job ----
  [ -n "$RUN_DIR" ] || usage
  if [ "$JOB_ARGS" -ne 0 ]; then
    echo "launch_local: --add_ps takes only --run_dir and --ps_flags (the job's settings are the running job's)" >&2
    exit 2
  fi
  if ! is_count "$ADD_PS" || [ "$ADD_PS" -lt 1 ]; then
    echo "launch_local: --add_ps needs a number of servers >= 1, not '$ADD_PS'" >&2
    exit 2
  fi
  if [ ! -d "$RUN_DIR" ]; then
    echo "launch_local: no run directory $RUN_DIR" >&2
    exit 1
  fi
  RUN_DIR="$(cd "$RUN_DIR" && pwd)"
  if [ ! -s "$RUN_DIR/master.endpoint" ] || [ ! -s "$RUN_DIR/master.pid" ]; then
    echo "launch_local: no running job in $RUN_DIR (no master.endpoint or master.pid there); start one with" \
      "scripts/launch_local.sh --config job.json --run_dir $RUN_DIR ..." >&2
    exit 1
  fi
  MASTER_PID="$(cat "$RUN_DIR/master.pid")"
  if ! is_count "$MASTER_PID" || ! running "$MASTER_PID"; then
    echo "launch_local: the job's master (pid $MASTER_PID in $RUN_DIR/master.pid) is gone; nothing to add servers to" >&2
    exit 1
  fi
  MASTER="$(cat "$RUN_DIR/master.endpoint")"
  PS_BIN="$(tessera_bin tessera_ps)" || exit 1
  # The job's own: its key folder, or --insecure.
  read -r -a SECURITY <"$RUN_DIR/security" || {
    echo "launch_local: no $RUN_DIR/security: the job was not started by this version of launch_local.sh" >&2
    exit 1
  }

  NEW_NAMES=()
  NEW_PIDS=()
  for _ in $(seq 1 "$ADD_PS"); do
    k="$(claim_ps_index)" || exit 1
    # setsid: the server outlives this invocation and its terminal; the
    # launcher running the job stops it through added_ps.pids.
    # shellcheck disable=SC2086  # the flags are meant to split into words
    setsid "$PS_BIN" --master "$MASTER" "${SECURITY[@]}" ${PS_FLAGS//\{i\}/$k} </dev/null >"$RUN_DIR/ps$k.log" 2>&1 &
    pid=$!
    disown "$pid"  # not this invocation's to report on
    echo "ps$k $pid" >>"$RUN_DIR/added_ps.pids"
    NEW_NAMES+=("ps$k"); NEW_PIDS+=("$pid")
    # shellcheck disable=SC2086
    echo "launch_local: started ps$k (pid $pid): $PS_BIN --master $MASTER" ${PS_FLAGS//\{i\}/$k} "(log: $RUN_DIR/ps$k.log)"
  done

  # Wait until every new server has registered with the master.
  PENDING=("${!NEW_PIDS[@]}")
  FAILED=0
  DEADLINE=$((SECONDS + 30))
  while [ ${#PENDING[@]} -gt 0 ]; do
    STILL=()
    for idx in "${PENDING[@]}"; do
      name="${NEW_NAMES[$idx]}"
      if grep -q "registered with the master" "$RUN_DIR/$name.log" 2>/dev/null; then
        echo "launch_local: $name registered with the master"
      elif ! running "${NEW_PIDS[$idx]}"; then
        echo "launch_local: $name (pid ${NEW_PIDS[$idx]}) exited before registering with the master; $RUN_DIR/$name.log:" >&2
        tail -n 20 "$RUN_DIR/$name.log" >&2
        FAILED=1
      else
        STILL+=("$idx")
      fi
    done
    PENDING=("${STILL[@]}")
    [ $FAILED -ne 0 ] && break
    if [ ${#PENDING[@]} -gt 0 ] && [ $SECONDS -ge $DEADLINE ]; then
      for idx in "${PENDING[@]}"; do
        name="${NEW_NAMES[$idx]}"
        echo "launch_local: $name (pid ${NEW_PIDS[$idx]}) did not register with the master within 30 s; $RUN_DIR/$name.log:" >&2
        [ -s "$RUN_DIR/$name.log" ] || echo "(empty)" >&2
        tail -n 20 "$RUN_DIR/$name.log" >&2
      done
      FAILED=1
      break
    fi
    [ ${#PENDING[@]} -gt 0 ] && sleep 0.2
  done
  if [ $FAILED -ne 0 ]; then
    # The ones still trying to register would join later, unannounced: stop them.
    for idx in "${PENDING[@]}"; do
      if running "${NEW_PIDS[$idx]}"; then
        echo "launch_local: stopping ${NEW_NAMES[$idx]} (pid ${NEW_PIDS[$idx]})" >&2
        kill -KILL "${NEW_PIDS[$idx]}" 2>/dev/null
      fi
    done
    exit 1
  fi
  exit 0
fi

# ---- the job ----
if [ -z "$CONFIG" ] || [ -z "$RUN_DIR" ]; then usage; fi
if ! is_count "$MAX_RESTARTS"; then
  echo "launch_local: --max_restarts needs a number >= 0, not '$MAX_RESTARTS'" >&2
  exit 2
fi
# The master takes 0 servers or trainers to mean the config's counts, so
# the job would wait for members this script never starts.
for count in "--ps $NUM_PS" "--trainers $NUM_TRAINERS" "--timeout_s $TIMEOUT_S"; do
  if ! is_count "${count#* }" || [ "${count#* }" -lt 1 ]; then
    echo "launch_local: ${count% *} needs a number >= 1, not '${count#* }'" >&2
    exit 2
  fi
done
if [ "$TRAINER_CPUS" != split ] && [ "$TRAINER_CPUS" != all ]; then
  echo "launch_local: --trainer_cpus takes split or all, not '$TRAINER_CPUS'" >&2
  exit 2
fi
MASTER_BIN="$(tessera_bin tessera_master)" || exit 1
PS_BIN="$(tessera_bin tessera_ps)" || exit 1
if [ -n "$TRAINER_CMD" ]; then
  TRAINER_BIN="$TRAINER_CMD"
  # A PyTorch trainer's dense layers run on torch's BLAS, which on Debian is
  # the same OpenBLAS: give it the kernels tessera_trainer runs on here, not
  # OpenBLAS's generic fallback for a CPU it does not know (kernels/blas_core.h).
  if [ -z "${OPENBLAS_CORETYPE:-}" ] && CPP_TRAINER="$(tessera_bin tessera_trainer 2>/dev/null)" &&
    BLAS_CORE="$("$CPP_TRAINER" --print_blas_core 2>/dev/null)" && [ -n "$BLAS_CORE" ]; then
    export OPENBLAS_CORETYPE="$BLAS_CORE"
  fi
else
  TRAINER_BIN="$(tessera_bin tessera_trainer)" || exit 1
fi
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
rm -f "$RUN_DIR"/master.endpoint "$RUN_DIR"/master.pid "$RUN_DIR"/added_ps.pids "$RUN_DIR"/*.log \
  "$RUN_DIR"/*.jsonl "$RUN_DIR"/summary.json "$RUN_DIR"/security
if [ "$INSECURE" = 1 ] && [ -n "$KEYS" ]; then
  echo "launch_local: give --keys or --insecure, not both" >&2
  exit 2
fi
if [ "$INSECURE" = 1 ]; then
  SECURITY=(--insecure)
  echo "launch_local: INSECURE: --insecure: the job runs on plain TCP; anyone who can reach its ports can talk to it" >&2
else
  if [ -z "$KEYS" ]; then
    # A new job, new keys: a member of an earlier job in this folder must not
    # be able to join this one.
    KEYS="$RUN_DIR/keys"
    rm -rf "$KEYS"
    "$MASTER_BIN" --make_keys "$KEYS" >/dev/null || exit 1
  fi
  KEYS="$(cd "$KEYS" && pwd)" || exit 1
  SECURITY=(--keys "$KEYS")
fi
echo "${SECURITY[*]}" >"$RUN_DIR/security"

PIDS=()
NAMES=()
CODES=()     # by index into PIDS: the exit code, once collected
REPLACED=()  # by index into PIDS: 1 for a process restarted in its place
RANKS=()     # by index into PIDS: a trainer's rank
TAIL_PIDS=() # the echoes of the masters' progress lines
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  rm -f "$RUN_DIR/master.pid"  # no more --add_ps for this job
  local added=() name pid
  while read -r name pid; do
    [ -n "$name" ] && running "$pid" && added+=("$pid")
  done < <(added_servers)
  for pid in "${PIDS[@]}" "${added[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 0.5
  for pid in "${PIDS[@]}" "${added[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${TAIL_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'echo "launch_local: interrupted" >&2; exit 130' INT TERM

# Starts the master as a child, named $1 (its log $1.log), listening on $2,
# with any further arguments.
start_master() {
  local name="$1" bind="$2"
  shift 2
  "$MASTER_BIN" --config "$CONFIG" "${SECURITY[@]}" --bind "$bind" --endpoint_file "$RUN_DIR/master.endpoint" \
    --num_ps "$NUM_PS" --num_trainers "$NUM_TRAINERS" --summary_file "$RUN_DIR/summary.json" \
    "$@" "${MASTER_EXTRA[@]}" >"$RUN_DIR/$name.log" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID"); NAMES+=("$name")
}
start_master master tcp://127.0.0.1:0

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

# On a terminal the master's progress lines ("[master] step ...") are one
# line redrawn in place (cursor up, clear), other lines go below it; in a
# log they stay lines.
# Two processes in the pipe either way: killing the last one ends tail too.
if [ -t 1 ]; then
  # bash's read takes one line at a time (mawk would wait for a full buffer).
  tail -n +1 -f "$RUN_DIR/master.log" 2>/dev/null | {
    live=0
    while IFS= read -r line; do
      case "$line" in
        "[master] step "*)
          [ "$live" = 1 ] && printf '\033[1A\033[2K'
          printf '%s\n' "$line"
          live=1 ;;
        "[master]"* | "Sharding plan"* | param* | t_* | "bytes per"*)
          printf '%s\n' "$line"
          live=0 ;;
      esac
    done
  } &
else
  tail -n +1 -f "$RUN_DIR/master.log" 2>/dev/null | grep --line-buffered -E '^\[master\]|^Sharding plan|^param|^t_|^bytes per' &
fi
TAIL_PIDS+=("$!")

# Starts server k as a child; its pid in PIDS, its name in NAMES.
start_ps() {
  # shellcheck disable=SC2086  # the flags are meant to split into words
  "$PS_BIN" --master "$MASTER" "${SECURITY[@]}" ${PS_FLAGS//\{i\}/$1} >"$RUN_DIR/ps$1.log" 2>&1 &
  PIDS+=("$!"); NAMES+=("ps$1")
}
for i in $(seq 0 $((NUM_PS - 1))); do start_ps "$i"; done
# --trainer_cpus split: the CPUs of each rank's trainer, comma-separated.
TRAINER_CPU_SETS=()
if [ "$TRAINER_CPUS" = split ] && is_count "$NUM_TRAINERS" && [ "$NUM_TRAINERS" -gt 1 ]; then
  mapfile -t CPUS < <(allowed_cpus)
  per=$((${#CPUS[@]} / NUM_TRAINERS))
  if [ "$per" -lt 1 ]; then
    echo "launch_local: $NUM_TRAINERS trainers on ${#CPUS[@]} CPU(s): the trainers share them" >&2
  elif ! command -v taskset >/dev/null; then
    echo "launch_local: taskset (util-linux) not found: the trainers share the CPUs" >&2
  else
    for r in $(seq 0 $((NUM_TRAINERS - 1))); do
      TRAINER_CPU_SETS[r]="$(IFS=,; echo "${CPUS[*]:r*per:per}")"
    done
    echo "launch_local: each trainer on $per CPU(s) of its own (trainer 0 on ${TRAINER_CPU_SETS[0]}," \
      "trainer $((NUM_TRAINERS - 1)) on ${TRAINER_CPU_SETS[NUM_TRAINERS - 1]}); the master and servers on all" \
      "${#CPUS[@]}" >&2
  fi
fi

# Starts trainer $1 as a child, named $2 (its log $2.log), on its rank's CPUs;
# a replacement appends to the same metrics file.
start_trainer() {
  local pin=()
  [ -n "${TRAINER_CPU_SETS[$1]:-}" ] && pin=(taskset -c "${TRAINER_CPU_SETS[$1]}")
  # shellcheck disable=SC2086  # the flags are meant to split into words
  "${pin[@]}" "$TRAINER_BIN" --master "$MASTER" "${SECURITY[@]}" --rank "$1" --world "$NUM_TRAINERS" \
    --metrics_file "$RUN_DIR/trainer$1.jsonl" ${TRAINER_FLAGS//\{r\}/$1} >"$RUN_DIR/$2.log" 2>&1 &
  PIDS+=("$!"); NAMES+=("$2"); RANKS[${#PIDS[@]}-1]="$1"
}
for r in $(seq 0 $((NUM_TRAINERS - 1))); do start_trainer "$r" "trainer$r"; done
# Written once the first servers have their indices: --add_ps looks for it.
echo "$MASTER_PID" >"$RUN_DIR/master.pid"

# The master decides when the job ends (done, or failed with a reason).
# Meanwhile servers that exit are collected, and replaced while restarts last.
RESTARTS=0
DEADLINE=$((SECONDS + TIMEOUT_S))
while :; do
  if ! kill -0 "$MASTER_PID" 2>/dev/null; then
    # A master killed by a signal is taken over by a new one on its address
    # (--recover); one that exited on its own ended the job.
    midx=$((${#PIDS[@]} - 1))
    while [ "${PIDS[$midx]}" != "$MASTER_PID" ]; do midx=$((midx - 1)); done
    wait "$MASTER_PID"
    code=$?
    CODES[midx]=$code
    if [ "$code" -lt 128 ] || [ "$RESTARTS" -ge "$MAX_RESTARTS" ]; then break; fi
    RESTARTS=$((RESTARTS + 1))
    REPLACED[midx]=1
    start_master "master.restart$RESTARTS" "$MASTER" --recover
    echo "$MASTER_PID" >"$RUN_DIR/master.pid"
    echo "launch_local: ${NAMES[$midx]} exited with code $code; started a master on $MASTER in its place with --recover (restart $RESTARTS of $MAX_RESTARTS, log master.restart$RESTARTS.log)" >&2
    tail -n +1 -f "$RUN_DIR/master.restart$RESTARTS.log" 2>/dev/null | grep --line-buffered -E '^\[master\]' &
    TAIL_PIDS+=("$!")
    continue
  fi
  if [ $SECONDS -ge $DEADLINE ]; then
    echo "launch_local: job exceeded ${TIMEOUT_S}s; stopping it" >&2
    kill -TERM "$MASTER_PID" 2>/dev/null
    sleep 5
    break
  fi
  for idx in "${!PIDS[@]}"; do
    [[ "${NAMES[$idx]}" == master* ]] && continue
    [ -n "${CODES[$idx]:-}" ] && continue
    kill -0 "${PIDS[$idx]}" 2>/dev/null && continue
    wait "${PIDS[$idx]}"
    code=$?
    CODES[idx]=$code
    # 0: drained (SIGTERM) or shut down by the master; 2: told that the job
    # was aborted, so the job is ending: neither wants a replacement.
    if [ "$code" -eq 0 ] || [ "$code" -eq 2 ] || [ "$MAX_RESTARTS" -eq 0 ]; then continue; fi
    if [ "$RESTARTS" -ge "$MAX_RESTARTS" ]; then
      echo "launch_local: ${NAMES[$idx]} exited with code $code; not restarted (all $MAX_RESTARTS restart(s) used)" >&2
      continue
    fi
    kill -0 "$MASTER_PID" 2>/dev/null || break
    if [[ "${NAMES[$idx]}" == ps* ]]; then
      k="$(claim_ps_index)" || continue
      RESTARTS=$((RESTARTS + 1))
      REPLACED[idx]=1
      start_ps "$k"
      echo "launch_local: ${NAMES[$idx]} exited with code $code; started ps$k in its place (restart $RESTARTS of $MAX_RESTARTS)" >&2
    else
      r="${RANKS[$idx]}"
      RESTARTS=$((RESTARTS + 1))
      REPLACED[idx]=1
      start_trainer "$r" "trainer$r.restart$RESTARTS"
      echo "launch_local: ${NAMES[$idx]} exited with code $code; started trainer $r again (restart $RESTARTS of $MAX_RESTARTS, log trainer$r.restart$RESTARTS.log)" >&2
    fi
  done
  sleep 0.2
done
rm -f "$RUN_DIR/master.pid"  # the job is over: no more --add_ps

# Give the others a moment to finish on their own, then collect exit codes.
FAILED=0
for idx in "${!PIDS[@]}"; do
  pid="${PIDS[$idx]}"
  if [ -n "${CODES[$idx]:-}" ]; then
    code="${CODES[$idx]}"
  else
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "launch_local: ${NAMES[$idx]} (pid $pid) still running after the master ended; killing it" >&2
      kill -KILL "$pid" 2>/dev/null
      FAILED=1
    fi
    wait "$pid"
    code=$?
  fi
  # A replaced server was reported when it was replaced; whether the job got
  # over its loss is the master's exit code.
  [ -n "${REPLACED[$idx]:-}" ] && continue
  if [ "$code" -ne 0 ]; then
    echo "launch_local: ${NAMES[$idx]} exited with code $code (log: $RUN_DIR/${NAMES[$idx]}.log)" >&2
    FAILED=1
  fi
done
# Servers added with --add_ps are not this script's children: bash cannot get
# their exit codes. Checked: that each has ended within 10 s of the master
# (else it is killed and the job fails). Not checked: how it ended; one that
# ended before the master is taken as fine when the master finished ok (a
# drained server exits 0; a lost one is what the master recovers from, or
# fails on, with its own exit code).
while read -r name pid; do
  for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then
    echo "launch_local: $name (pid $pid, added with --add_ps) still running after the master ended; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    FAILED=1
  fi
done < <(added_servers)
sleep 0.3
exit $FAILED
