#!/usr/bin/env bash
# Soak (issue 13): a long asynchronous job with periodic checkpoints and one
# parameter server killed midway, while the memory, open files and threads of
# every process are sampled; fails if any of them grows past the limits below
# after its warm-up, or if the job does not recover and finish.
#
#   bench/soak.sh [--minutes 30] [--run_dir DIR] [--ps 2] [--trainers 4] [--sample_s 10]
#       [--warmup_fraction 0.2 | --warmup_minutes W] [--checkpoint_minutes C]
#       [--ps_flags "FLAGS"] [--launch_flags "FLAGS"]
#
# What it runs (all on 127.0.0.1, through scripts/launch_local.sh with
# --max_restarts 1): 1 master, --ps servers, --trainers trainers, async mode,
# synthetic data (deterministic, no data files needed): 4 tables of 100,000
# rows x 32 (adagrad, so rows carry optimizer state), bags of 10 ids drawn
# uniformly (zipf 0), so every row exists after the first few hundred steps
# and the servers' rows stop growing early in the warm-up; 13 dense features,
# MLPs 64-16 and 128-64-1, batch 256 per trainer. The job config is written to
# DIR/job.json.
#   1. Calibration: the same job without checkpoints for about 45 s
#      (DIR/calibration/); its steps per second (counted from the master's
#      progress lines, after 10 s) size the soak job, which then ends by
#      itself: training.steps = rate x (minutes x 60 - 25 s), a checkpoint
#      every rate x checkpoint_minutes x 60 steps (checkpoint.dir DIR/ckpt,
#      keep 2; --checkpoint_minutes defaults to 4, or minutes / 4 when that is
#      less), runtime.replacement_wait_ms 10000 (the recovery waits for the
#      restarted server rather than going on without it). Load on this shared
#      machine changes the rate, so the job may run somewhat shorter or longer
#      than --minutes; the time it took is printed.
#   2. The soak job (DIR/job/: its logs, metrics and summary.json; the output
#      of launch_local.sh in DIR/launch_local.log). Every --sample_s seconds
#      each process of the job (found by its binary, /proc/PID/exe, and its
#      stdout, /proc/PID/fd/1, being a log in DIR/job) is sampled: RSS (VmRSS
#      of /proc/PID/status), open file descriptors (entries of /proc/PID/fd)
#      and threads (Threads of /proc/PID/status), one line per process to
#      DIR/soak_samples.csv: time_s,name,pid,rss_kb,fds,threads (time_s from
#      the launch of the soak job; name from the log: master, ps<i>,
#      trainer<r>). Events (checkpoints seen, the kill, the end) go to
#      DIR/soak_events.txt.
#   3. Midway (minutes / 2), the script waits for the next checkpoint to
#      complete, then 10 s later kills the last original server
#      (ps<N-1>) with SIGKILL; launch_local.sh starts a new server in its
#      place (the next free index), and the master rolls the job back to that
#      checkpoint and goes on (so only ~10 s of steps are replayed).
#   4. The job ends by itself; the script then makes sure that no process of
#      it is left (by pid: the job's binaries writing into DIR/job and any
#      process whose command line names DIR/job, e.g. launch_local's tail) and
#      deletes the checkpoints (DIR/ckpt). DIR is kept.
#   5. The samples judged (below) also go to DIR/soak_samples.jsonl, one line
#      per sample: time_min, process (the table's name: ps1 (killed), ps2
#      (new)...), pid, rss_mib, fds, threads; drawn, as bench/e2e_bench.sh
#      draws its results, to DIR/soak.png: RSS, open files and threads of
#      each process over time, the end of the warm-up and the kill marked
#      (needs Debian's python3-matplotlib; said when missing).
#
# Judging, per series (one process: a name and a pid; a process started in
# place of another is a new series), from the samples taken before the
# master printed that the job finished:
#   - warm-up: the first --warmup_fraction of --minutes (default 0.2, i.e. 6
#     of 30 minutes; 2.5 minutes at least), or --warmup_minutes, from the
#     series' own first sample; it covers the start, the rows being created,
#     the first checkpoints' buffers and the two minutes of replies kept for
#     calls sent again. A series with fewer than 3 samples after its warm-up is not
#     judged ("short").
#   - "first" is the median of the first 3 samples after the warm-up, "last"
#     the median of the last 3 (one odd sample, e.g. taken while a checkpoint
#     holds a file open, moves neither); "max" the largest sample after the
#     warm-up, shown but not judged (a transient peak is not a leak; a leak
#     keeps growing, so it shows at the end).
#   - RSS: PASS when last <= first x 1.05 (the issue's <= 5%).
#   - FDs and threads: PASS when last <= first + 2. These are small counts
#     (tens), constant in a steady state: the sockets ZeroMQ and Gloo keep
#     per peer, the log and metrics files, a fixed pool of threads. A leak of
#     them happens per event (per request, per checkpoint, per recovery) and
#     then grows by at least one per event, so a percentage rule would be
#     either too loose (5% of 40 is 2) or meaningless; +2 absorbs a file or
#     thread that exists only while a checkpoint or a reconnection is in
#     flight at the instant of a sample (a server writing a checkpoint holds
#     a rows.bin per shard open).
#   - The processes that outlive the kill (the master, the other servers, the
#     trainers) are judged across it, as the issue asks: what the recovery
#     leaves behind counts. The last column shows, for them, the growth from
#     60 s after the kill to the end, which tells a step at the recovery from
#     growth that goes on.
# Prints a table (markdown) of every series, and "CURVE: on/off/unknown"
# (whether the job ran with ZeroMQ CURVE, from what master.log says about
# CURVE: "unknown" when it says nothing; this script passes no key flags;
# launch_local.sh decides). Exits 0 when every judged series passes and the
# job finished (launch_local.sh exited 0, the master printed "job ... finished",
# summary.json says ok) after recovering from the kill ("[master] recovered");
# 1 otherwise; 2 on bad arguments.
#
# --ps_flags go to every server as launch_local.sh's ({i}: its index), e.g.
# "--rocksdb_path DIR/rocks{i} --host_bytes 20000000" to soak the RocksDB
# tier; --launch_flags are more launch_local.sh flags (e.g. "--insecure").
# Needs python3. Binaries from $TESSERA_BIN_DIR or $TESSERA_BUILD_DIR (default
# build/), as launch_local.sh; nothing is built. The jobs run a copy of
# scripts/launch_local.sh and common.sh taken at the start (DIR/scripts/):
# bash reads a script while it runs it, and an edit of launch_local.sh during
# a 30-minute soak broke the running launcher once (a syntax error mid-job).
# TESSERA_LAUNCH_LOCAL=PATH copies another launch_local.sh (with the
# common.sh next to it), e.g. one that matches older binaries.
# The machine is loaded for the whole run (the job takes every core); the
# trainers' metrics files (DIR/job/trainer<r>.jsonl) take ~300 bytes a step
# each, about 35 MB per trainer in 30 minutes here.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MINUTES=30
RUN_DIR=""
NUM_PS=2
TRAINERS=4
SAMPLE_S=10
WARMUP_FRACTION=0.2
WARMUP_MINUTES=""
CKPT_MINUTES=""
PS_FLAGS=""
LAUNCH_FLAGS=""
KILL_DELAY_S=10  # from the checkpoint after the midpoint to the kill
CAL_WARM_S=10    # calibration: seconds of steps not counted
CAL_MEASURE_S=30 # calibration: seconds of steps counted
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --run_dir) RUN_DIR="$2"; shift 2 ;;
    --ps) NUM_PS="$2"; shift 2 ;;
    --trainers) TRAINERS="$2"; shift 2 ;;
    --sample_s) SAMPLE_S="$2"; shift 2 ;;
    --warmup_fraction) WARMUP_FRACTION="$2"; shift 2 ;;
    --warmup_minutes) WARMUP_MINUTES="$2"; shift 2 ;;
    --checkpoint_minutes) CKPT_MINUTES="$2"; shift 2 ;;
    --ps_flags) PS_FLAGS="$2"; shift 2 ;;
    --launch_flags) LAUNCH_FLAGS="$2"; shift 2 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
is_number() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }
is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }
for v in "$MINUTES" "$WARMUP_FRACTION" ${WARMUP_MINUTES:+"$WARMUP_MINUTES"} ${CKPT_MINUTES:+"$CKPT_MINUTES"}; do
  is_number "$v" || { echo "soak: '$v' is not a number" >&2; exit 2; }
done
if ! is_count "$NUM_PS" || ! is_count "$TRAINERS" || ! is_count "$SAMPLE_S" || [ "$NUM_PS" -lt 2 ] ||
  [ "$TRAINERS" -lt 1 ] || [ "$SAMPLE_S" -lt 1 ]; then
  echo "soak: need --ps >= 2 (one survives the kill), --trainers >= 1, --sample_s >= 1 (whole numbers)" >&2
  exit 2
fi
# Float arithmetic: awk.
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
MINUTES_S="$(calc "$MINUTES * 60")"
if [ "$(calc "$MINUTES_S < 120")" != "0.000000" ]; then
  echo "soak: --minutes must be at least 2" >&2
  exit 2
fi
if [ -z "$CKPT_MINUTES" ]; then
  CKPT_MINUTES="$(calc "($MINUTES / 4 < 4) ? $MINUTES / 4 : 4")"
fi
if [ -n "$WARMUP_MINUTES" ]; then
  WARMUP_S="$(calc "$WARMUP_MINUTES * 60")"
else
  # At least 2.5 minutes: the master and the servers keep each small reply
  # for two minutes (common/recent_replies.h), so a steady stream of
  # requests (the master's heartbeats) fills that table for the first two.
  WARMUP_S="$(calc "($WARMUP_FRACTION * $MINUTES_S > 150) ? $WARMUP_FRACTION * $MINUTES_S : 150")"
fi
command -v python3 >/dev/null || { echo "soak: needs python3" >&2; exit 1; }
read -r -a LAUNCH_EXTRA <<<"$LAUNCH_FLAGS"
LAUNCH_SRC="${TESSERA_LAUNCH_LOCAL:-$ROOT/scripts/launch_local.sh}"
if [ ! -f "$LAUNCH_SRC" ] || [ ! -f "$(dirname "$LAUNCH_SRC")/common.sh" ]; then
  echo "soak: no $LAUNCH_SRC with a common.sh next to it" >&2
  exit 1
fi

if [ -z "$RUN_DIR" ]; then
  RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")"
fi
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
# The job runs a copy of launch_local.sh: bash reads a script as it runs it,
# so an edit of scripts/launch_local.sh during a long soak would break the
# running job. The copy's own default for the binaries would be DIR/build.
mkdir -p "$RUN_DIR/scripts"
cp "$LAUNCH_SRC" "$RUN_DIR/scripts/launch_local.sh"
cp "$(dirname "$LAUNCH_SRC")/common.sh" "$RUN_DIR/scripts/common.sh"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
LAUNCH="$RUN_DIR/scripts/launch_local.sh"
# shellcheck source=../scripts/common.sh disable=SC1091
source "$RUN_DIR/scripts/common.sh"
tessera_bin tessera_master >/dev/null
tessera_bin tessera_ps >/dev/null
tessera_bin tessera_trainer >/dev/null
JOB_DIR="$RUN_DIR/job"
CAL_DIR="$RUN_DIR/calibration"
CKPT_DIR="$RUN_DIR/ckpt"
SAMPLES="$RUN_DIR/soak_samples.csv"
EVENTS="$RUN_DIR/soak_events.txt"
rm -rf "$JOB_DIR" "$CAL_DIR" "$CKPT_DIR"
mkdir -p "$JOB_DIR" "$CAL_DIR"

# now_us: microseconds since the epoch; elapsed: seconds since $T0_US, 0.1 s.
now_us() { local t="$EPOCHREALTIME"; echo "${t/./}"; }
elapsed() {
  local us=$(($(now_us) - T0_US))
  printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}
elapsed_s() { echo $((($(now_us) - T0_US) / 1000000)); }
event() { echo "$(elapsed) $*" >>"$EVENTS"; echo "soak: [$(elapsed) s] $*"; }

# The job's processes, from /proc: "name pid" for each process running one of
# our binaries with its stdout in a log in $1 (name: the log's, less .log).
job_procs() {
  local dir="$1" p pid comm out
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    read -r comm 2>/dev/null <"$p/comm" || continue
    case "$comm" in tessera_master | tessera_ps | tessera_trainer) ;; *) continue ;; esac
    out="$(readlink "$p/fd/1" 2>/dev/null)" || continue
    [[ "$out" == "$dir"/*.log ]] || continue
    running "$pid" || continue
    out="${out##*/}"
    echo "${out%.log} $pid"
  done
}
# Every process left of a job in $1: its binaries (as above) and any process
# whose command line names $1 (trainers' metrics files, launch_local's tail).
# Not this script nor its subshells. Prints pids.
leftovers() {
  local dir="$1" p pid cmd
  {
    job_procs "$dir" | cut -d' ' -f2
    for p in /proc/[0-9]*; do
      pid="${p#/proc/}"
      [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
      cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
      [[ "$cmd" == *"$dir/"* ]] || continue
      [[ "$cmd" == *bench/soak.sh* ]] && continue
      running "$pid" && echo "$pid"
    done
  } | sort -un
}
# Stops what is left of a job in $1 (TERM, then KILL, by pid); returns 1 when
# something was left.
reap_job() {
  local dir="$1" pids pid
  pids="$(leftovers "$dir")"
  [ -z "$pids" ] && return 0
  for pid in $pids; do
    echo "soak: pid $pid of the job in $dir still running ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)); stopping it" >&2
    kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 1
  for pid in $pids; do running "$pid" && kill -KILL "$pid" 2>/dev/null; done
  return 1
}

LAUNCHER=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ -n "$LAUNCHER" ] && running "$LAUNCHER"; then
    kill -TERM "$LAUNCHER" 2>/dev/null || true  # launch_local.sh stops its job
    for _ in $(seq 1 50); do running "$LAUNCHER" || break; sleep 0.2; done
    running "$LAUNCHER" && kill -KILL "$LAUNCHER" 2>/dev/null
  fi
  wait 2>/dev/null || true
  reap_job "$JOB_DIR" || true
  reap_job "$CAL_DIR" || true
  rm -rf "$CKPT_DIR"
}
trap cleanup EXIT
trap 'echo "soak: interrupted" >&2; exit 130' INT TERM

# The job config: steps, log_every, checkpoint every_steps (0: no checkpoints).
write_config() {
  python3 - "$1" "$2" "$3" "$4" "$CKPT_DIR" "$NUM_PS" "$TRAINERS" <<'PY'
import json, sys
path, steps, log_every, every, ckpt, num_ps, trainers = sys.argv[1:]
tables = [{"name": "t%d" % i, "num_embeddings": 100000, "embedding_dim": 32, "feature_names": ["f%d" % i],
           "pooling": "SUM", "optimizer": {"type": "adagrad", "lr": 0.05},
           "initializer": {"type": "uniform", "low": -0.05, "high": 0.05}} for i in range(4)]
c = {
    "name": "soak",
    "cluster": {"num_ps": int(num_ps), "num_trainers": int(trainers)},
    "tables": tables,
    "model": {"num_dense_features": 13, "bottom_mlp": [64, 16], "top_mlp": [128, 64, 1]},
    "data": {"source": "synthetic", "num_examples": 1000000, "ids_per_bag": 10, "zipf": 0.0,
             "labels": "learnable"},
    "training": {"batch_size": 256, "steps": int(steps), "consistency": "async",
                 "dense_optimizer": {"type": "sgd", "lr": 0.05},
                 "sparse_optimizer": {"type": "sgd", "lr": 0.05}, "seed": 13, "log_every": int(log_every)},
    "runtime": {"replacement_wait_ms": 10000},
}
if int(every) > 0:
    c["checkpoint"] = {"dir": ckpt, "every_steps": int(every), "keep": 2}
json.dump(c, open(path, "w"), indent=2)
PY
}
# The step of the master's newest progress line in $1 (0 before the first).
last_step() {
  local s
  s="$(grep -o '^\[master\] step *[0-9]*' "$1" 2>/dev/null | tail -n 1 | awk '{print $3}' || true)"
  echo "${s:-0}"
}
count_in() { grep -c -- "$1" "$2" 2>/dev/null || true; }

echo "soak: $MINUTES min, $NUM_PS server(s), $TRAINERS trainer(s), a sample every $SAMPLE_S s," \
  "warm-up $(awk "BEGIN { printf \"%.1f\", $WARMUP_S / 60 }") min per process," \
  "a checkpoint every ~$(awk "BEGIN { printf \"%.1f\", $CKPT_MINUTES }") min; in $RUN_DIR"
echo "soak: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- 1. calibration ----
write_config "$CAL_DIR/job.json" 1000000000 20 0
T0_US="$(now_us)"
"$LAUNCH" --ps "$NUM_PS" --trainers "$TRAINERS" --config "$CAL_DIR/job.json" \
  --run_dir "$CAL_DIR" --timeout_s 600 ${PS_FLAGS:+--ps_flags "$PS_FLAGS"} "${LAUNCH_EXTRA[@]}" \
  >"$RUN_DIR/calibration.log" 2>&1 &
LAUNCHER=$!
FIRST=""
while running "$LAUNCHER"; do
  [ "$(last_step "$CAL_DIR/master.log")" -gt 0 ] && { FIRST="$(now_us)"; break; }
  [ "$(elapsed_s)" -gt 180 ] && break
  sleep 0.2
done
RATE=""
if [ -n "$FIRST" ]; then
  while running "$LAUNCHER" && [ $(($(now_us) - FIRST)) -lt $((CAL_WARM_S * 1000000)) ]; do sleep 0.2; done
  S0="$(last_step "$CAL_DIR/master.log")"; U0="$(now_us)"
  while running "$LAUNCHER" && [ $(($(now_us) - U0)) -lt $((CAL_MEASURE_S * 1000000)) ]; do sleep 0.2; done
  S1="$(last_step "$CAL_DIR/master.log")"; U1="$(now_us)"
  running "$LAUNCHER" && [ "$S1" -gt "$S0" ] && RATE="$(calc "($S1 - $S0) * 1000000 / ($U1 - $U0)")"
fi
kill -TERM "$LAUNCHER" 2>/dev/null || true
wait "$LAUNCHER" 2>/dev/null || true
LAUNCHER=""
if ! reap_job "$CAL_DIR"; then
  echo "soak: the calibration job left processes behind (stopped)" >&2
fi
if [ -z "$RATE" ]; then
  echo "soak: the calibration job made no progress; $RUN_DIR/calibration.log and $CAL_DIR/master.log:" >&2
  tail -n 20 "$RUN_DIR/calibration.log" "$CAL_DIR/master.log" >&2 || true
  exit 1
fi
STEPS="$(calc "$RATE * ($MINUTES_S - 15 - $KILL_DELAY_S)" | cut -d. -f1)"
EVERY="$(calc "$RATE * $CKPT_MINUTES * 60" | cut -d. -f1)"
LOG_EVERY="$(calc "$RATE * 5" | cut -d. -f1)"
[ "$EVERY" -ge 1 ] || EVERY=1
[ "$LOG_EVERY" -ge 10 ] || LOG_EVERY=10
echo "soak: calibration: $(calc "$RATE" | cut -d. -f1) steps/s ($((S1 - S0)) steps in $(((U1 - U0) / 1000000)) s," \
  "after $CAL_WARM_S s); the soak job: $STEPS steps, a checkpoint every $EVERY, progress every $LOG_EVERY"

# ---- 2. the soak job ----
write_config "$RUN_DIR/job.json" "$STEPS" "$LOG_EVERY" "$EVERY"
TIMEOUT_S="$(calc "$MINUTES_S * 3 + 600" | cut -d. -f1)"
: >"$EVENTS"
echo "time_s,name,pid,rss_kb,fds,threads" >"$SAMPLES"
T0_US="$(now_us)"
"$LAUNCH" --ps "$NUM_PS" --trainers "$TRAINERS" --config "$RUN_DIR/job.json" \
  --run_dir "$JOB_DIR" --max_restarts 1 --timeout_s "$TIMEOUT_S" ${PS_FLAGS:+--ps_flags "$PS_FLAGS"} \
  "${LAUNCH_EXTRA[@]}" >"$RUN_DIR/launch_local.log" 2>&1 &
LAUNCHER=$!
event "launched the soak job (launch_local.sh pid $LAUNCHER)"

sample_all() {
  local t name pid k v rss thr fds n=0
  t="$(elapsed)"
  while read -r name pid; do
    rss=""; thr=""
    while read -r k v _; do
      case "$k" in VmRSS:) rss="$v" ;; Threads:) thr="$v" ;; esac
    done 2>/dev/null <"/proc/$pid/status" || continue
    fds=("/proc/$pid/fd/"*)
    [ -L "${fds[0]}" ] || continue  # it has just ended
    if [ -z "$rss" ] || [ -z "$thr" ]; then continue; fi
    echo "$t,$name,$pid,$rss,${#fds[@]},$thr" >>"$SAMPLES"
    n=$((n + 1))
  done < <(job_procs "$JOB_DIR")
  echo "$n"
}

VICTIM="ps$((NUM_PS - 1))"
MID_S="$(calc "$MINUTES_S / 2" | cut -d. -f1)"
KILL_STATE=before_mid  # before_mid -> wait_ckpt -> delay -> killed
CKPTS_SEEN=0
CKPTS_AT_MID=0
KILL_AT=0
GIVE_UP_AT=0
FINISHED=0
NEXT_SAMPLE=0
NEXT_STATUS=60
while running "$LAUNCHER"; do
  now="$(elapsed_s)"
  mlog="$JOB_DIR/master.log"
  if [ "$now" -ge "$NEXT_SAMPLE" ]; then
    sample_all >/dev/null
    NEXT_SAMPLE=$((NEXT_SAMPLE + SAMPLE_S))
  fi
  c="$(count_in "checkpoint at step .* complete" "$mlog")"
  if [ "${c:-0}" -gt "$CKPTS_SEEN" ]; then
    CKPTS_SEEN="$c"
    event "checkpoint $c: $(grep -o 'checkpoint at step [0-9]* complete.*' "$mlog" | tail -n 1 | sed 's/ in .*(/ (/')"
  fi
  if [ "$FINISHED" = 0 ] && grep -q "^\[master\] job '.*' finished\|^\[master\] JOB FAILED" "$mlog" 2>/dev/null; then
    FINISHED=1
    event "job_end: $(grep -h "^\[master\] job '.*' finished\|^\[master\] JOB FAILED" "$mlog" | tail -n 1)"
  fi
  case "$KILL_STATE" in
    before_mid)
      if [ "$now" -ge "$MID_S" ]; then
        CKPTS_AT_MID="$CKPTS_SEEN"
        GIVE_UP_AT=$((now + $(calc "$CKPT_MINUTES * 90 + 60" | cut -d. -f1)))
        KILL_STATE=wait_ckpt
        event "midway: waiting for the next checkpoint to kill $VICTIM"
      fi ;;
    wait_ckpt)
      if [ "$CKPTS_SEEN" -gt "$CKPTS_AT_MID" ]; then
        KILL_AT=$((now + KILL_DELAY_S)); KILL_STATE=delay
      elif [ "$now" -ge "$GIVE_UP_AT" ]; then
        KILL_AT="$now"; KILL_STATE=delay
        event "no checkpoint since the midpoint; killing now"
      fi ;;
    delay)
      if [ "$now" -ge "$KILL_AT" ] && [ "$FINISHED" = 0 ]; then
        vpid="$(job_procs "$JOB_DIR" | awk -v n="$VICTIM" '$1 == n {print $2}')"
        if [ -n "$vpid" ]; then
          sample_all >/dev/null  # the victim's last sample
          kill -KILL "$vpid"
          event "kill: SIGKILL to $VICTIM (pid $vpid) at step $(last_step "$mlog")"
          KILL_STATE=killed
        else
          event "kill: no $VICTIM running; nothing killed"
          KILL_STATE=none
        fi
      fi ;;
  esac
  if [ "$now" -ge "$NEXT_STATUS" ]; then
    echo "soak: [$now s] step $(last_step "$mlog") of $STEPS; processes: $(job_procs "$JOB_DIR" | cut -d' ' -f1 | sort | tr '\n' ' ')"
    NEXT_STATUS=$((NEXT_STATUS + 60))
  fi
  sleep 1
done
LAUNCH_RC=0
wait "$LAUNCHER" || LAUNCH_RC=$?
LAUNCHER=""
event "launch_local.sh exited with code $LAUNCH_RC"
LEFT=0
reap_job "$JOB_DIR" || LEFT=1
[ -n "$(leftovers "$JOB_DIR")" ] && LEFT=1
rm -rf "$CKPT_DIR"

# ---- 3. verdicts ----
JOB_OK=1
why=()
[ "$LAUNCH_RC" -eq 0 ] || { JOB_OK=0; why+=("launch_local.sh exited with code $LAUNCH_RC"); }
grep -q "^\[master\] job '.*' finished" "$JOB_DIR"/master*.log ||
  { JOB_OK=0; why+=("the master never printed \"job ... finished\" ($JOB_DIR/master.log)"); }
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("ok") else 1)' "$JOB_DIR/summary.json" \
  2>/dev/null || { JOB_OK=0; why+=("summary.json missing or not ok"); }
if [ "$KILL_STATE" != killed ]; then
  JOB_OK=0; why+=("no server was killed (state $KILL_STATE): the job ended before the midpoint?")
elif ! grep -q "^\[master\] recovered" "$JOB_DIR"/master*.log; then
  JOB_OK=0; why+=("the master never printed \"recovered\" after the kill")
fi
[ "$LEFT" -eq 0 ] || { JOB_OK=0; why+=("processes of the job were left behind (stopped)"); }

# What the master says: "listening on ... (CURVE: encrypted, ...)" or
# "(INSECURE: plain TCP)" and an INSECURE warning; older binaries say nothing.
insecure="$(grep -hiE "insecure|plain tcp" "$JOB_DIR"/master*.log 2>/dev/null | head -n 1 || true)"
curve="$(grep -hi "curve" "$JOB_DIR"/master*.log 2>/dev/null | head -n 1 || true)"
if [ -n "$insecure" ]; then
  CURVE="off (${insecure:0:160})"
elif [ -n "$curve" ]; then
  CURVE="on (${curve:0:160})"
else
  CURVE="unknown (master.log never mentions CURVE: binaries from before CURVE, which run without it)"
fi

echo
echo "soak: job: $(grep -h "^\[master\] job '.*' finished\|^\[master\] JOB FAILED" "$JOB_DIR"/master*.log | tail -n 1)"
grep -h "^\[master\] lost\|^\[master\] rolling back\|^\[master\] recovered\|^\[master\] plan version" \
  "$JOB_DIR"/master*.log | cut -c1-200 | sed 's/^/soak:   /' || true
echo "soak: CURVE: $CURVE"
echo "soak: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
set +e
python3 - "$SAMPLES" "$EVENTS" "$WARMUP_S" "$VICTIM" "$RUN_DIR/soak_samples.jsonl" <<'PY'
import csv, json, statistics, sys
samples, events, warmup, victim = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
end, kill_t = float("inf"), None
for line in open(events):
    t, _, what = line.rstrip("\n").partition(" ")
    if what.startswith("job_end") and float(t) < end:
        end = float(t)
    if what.startswith("kill: SIGKILL"):
        kill_t = float(t)
series = {}
for r in csv.DictReader(open(samples)):
    t = float(r["time_s"])
    if t >= end:  # the job's own teardown is not steady state
        continue
    series.setdefault((r["name"], int(r["pid"])), []).append(
        (t, int(r["rss_kb"]), int(r["fds"]), int(r["threads"])))
med = lambda xs: statistics.median(xs)
print("| process | pid | sampled (min) | judged from (min) | RSS MiB first → last (max) | RSS growth % | "
      "FDs first → last (max) | threads first → last (max) | verdict | after the kill: RSS %, FDs, threads |")
print("| --- | ---: | --- | ---: | --- | ---: | --- | --- | --- | --- |")
fails = 0
order = sorted(series, key=lambda k: (series[k][0][0], k[0]))
labels = set()
jsonl = open(sys.argv[5], "w")  # the samples, for the plot
for key in order:
    pts = series[key]
    name, pid = key
    label = name
    if kill_t is not None and name == victim and pts[0][0] < kill_t:
        label += " (killed)"
    elif kill_t is not None and pts[0][0] > kill_t:
        label += " (new)"
    process = label if label not in labels else "%s pid %d" % (label, pid)
    labels.add(process)
    for t, rss, fds, threads in pts:
        jsonl.write(json.dumps({"time_min": round(t / 60, 3), "process": process, "pid": pid,
                                "rss_mib": round(rss / 1024, 2), "fds": fds, "threads": threads}) + "\n")
    start = pts[0][0]
    post = [p for p in pts if p[0] >= start + warmup]
    span = "%.1f–%.1f" % (start / 60, pts[-1][0] / 60)
    if len(post) < 3:
        print("| %s | %d | %s | %.1f | %.0f MiB (%d samples) | | | | short: not judged | |"
              % (label, pid, span, (start + warmup) / 60, pts[-1][1] / 1024, len(pts)))
        continue
    first = [med([p[i] for p in post[:3]]) for i in (1, 2, 3)]
    last = [med([p[i] for p in post[-3:]]) for i in (1, 2, 3)]
    mx = [max(p[i] for p in post) for i in (1, 2, 3)]
    g = 100.0 * (last[0] - first[0]) / first[0]
    bad = []
    if last[0] > first[0] * 1.05:
        bad.append("RSS +%.1f%%" % g)
    if last[1] > first[1] + 2:
        bad.append("FDs +%d" % (last[1] - first[1]))
    if last[2] > first[2] + 2:
        bad.append("threads +%d" % (last[2] - first[2]))
    fails += bool(bad)
    # Informative: growth once the recovery from the kill has settled (60 s),
    # for a series judged across the kill: a step at the kill, or growth after it?
    after = ""
    late = [p for p in post if kill_t is not None and post[0][0] < kill_t and p[0] >= kill_t + 60]
    if len(late) >= 6:
        a = [med([p[i] for p in late[:3]]) for i in (1, 2, 3)]
        after = "%+.1f, %+d, %+d" % (100.0 * (last[0] - a[0]) / a[0], last[1] - a[1], last[2] - a[2])
    print("| %s | %d | %s | %.1f | %.1f → %.1f (%.1f) | %+.1f | %d → %d (%d) | %d → %d (%d) | %s | %s |" % (
        label, pid, span, post[0][0] / 60, first[0] / 1024, last[0] / 1024, mx[0] / 1024, g,
        first[1], last[1], mx[1], first[2], last[2], mx[2], "FAIL: " + ", ".join(bad) if bad else "PASS", after))
jsonl.close()
print()
print("soak: %d series, %d FAIL; samples in %s" % (len(series), fails, samples))
sys.exit(1 if fails else 0)
PY
TABLE_RC=$?
set -e
# The picture (Debian's python3-matplotlib; said when missing): each
# process's RSS, open files and threads over time, the end of the warm-up
# and the kill marked.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  kill_s="$(awk '/ kill: SIGKILL/ {print $1; exit}' "$EVENTS")"
  "$ROOT/scripts/plot_bench.py" "$RUN_DIR/soak_samples.jsonl" --out "$RUN_DIR/soak.png" \
    --x "time_min=minutes since the launch" --by process --mark "$(calc "$WARMUP_S / 60")=warm-up ends" \
    ${kill_s:+--mark "$(calc "$kill_s / 60")=kill -9 $VICTIM"} \
    --panel "RSS (MiB)" --series "rss_mib=RSS" --panel "open files" --series "fds=open files" \
    --panel threads --series "threads=threads" \
    --title "soak: $MINUTES min, $NUM_PS servers, $TRAINERS trainers, a checkpoint every $EVERY steps" ||
    echo "soak: no plot (plot_bench.py failed)" >&2
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
FAILED=0
[ "$TABLE_RC" -eq 0 ] || FAILED=1
if [ "$JOB_OK" -eq 1 ]; then
  echo "soak: job: OK (finished after recovering from the kill)"
else
  FAILED=1
  for w in "${why[@]}"; do echo "soak: job: FAILED: $w" >&2; done
fi
echo "soak: $([ "$FAILED" -eq 0 ] && echo PASS || echo FAIL); everything is in $RUN_DIR"
exit $FAILED
