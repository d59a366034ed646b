# Test hosts on one machine, for tests/cluster/*.sh (sourced): network
# namespaces <PFX>-<host>, each with one veth (e0) whose other end is a port
# of a bridge in a namespace of its own (<PFX>-sw), addresses 10.77.0.0/24.
# Nothing is created in the caller's namespace. The caller sets PFX and
# HOSTS (names) before make_hosts, and calls remove_hosts when done (also on
# failure: from its EXIT trap).

TESSERA_ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
declare -A ADDR=()
NAMESPACES=()

skip() { echo "SKIPPED: $*"; exit 77; }

# require_binaries: the roles and tessera_compare_dumps in TESSERA_BUILD_DIR
# (sets COMPARE), or the test fails.
require_binaries() {
  COMPARE="$TESSERA_BUILD_DIR/tests/tessera_compare_dumps"
  for bin in master/tessera_master ps/tessera_ps trainer/tessera_trainer tests/tessera_compare_dumps; do
    [ -x "$TESSERA_BUILD_DIR/$bin" ] || { echo "FAIL: $TESSERA_BUILD_DIR/$bin not found; build first"; exit 1; }
  done
}

# make_hosts_and_reference: the hosts of HOSTS, and <PFX>-lo, a host whose
# loopback runs the reference job; skips the test where namespaces cannot
# be made.
make_hosts_and_reference() {
  make_hosts
  case $? in
    0) ;;
    2) skip "cannot create network namespaces here" ;;
    *) echo "FAIL: could not build the test hosts"; exit 1 ;;
  esac
  ns_add "$PFX-lo" || exit 1
}

ns_add() {
  ip netns add "$1" || return 1
  NAMESPACES+=("$1")
  ip -n "$1" link set lo up
}

# make_hosts: the switch and one namespace per name in HOSTS (10.77.0.1 on).
make_hosts() {
  ns_add "$PFX-sw" || return 2
  ip -n "$PFX-sw" link add br0 type bridge && ip -n "$PFX-sw" link set br0 up || return 1
  local n=1
  for h in "${HOSTS[@]}"; do
    ADDR[$h]="10.77.0.$n"
    n=$((n + 1))
    ns_add "$PFX-$h" || return 1
    ip -n "$PFX-$h" link add e0 type veth peer name "port-$h" netns "$PFX-sw" || return 1
    ip -n "$PFX-sw" link set "port-$h" master br0 || return 1
    ip -n "$PFX-sw" link set "port-$h" up || return 1
    ip -n "$PFX-$h" addr add "${ADDR[$h]}/24" dev e0 || return 1
    ip -n "$PFX-$h" link set e0 up || return 1
  done
}

# Processes the caller started on the hosts, by pid: kill_started kills and
# reaps them (also from an EXIT trap).
PIDS=()
kill_started() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}

# run_job_on_hosts RUN KEYS NUM_PS: the job of RUN/job.json with its master
# on host m (port 5555), NUM_PS servers on p0.. and 2 trainers on t0 and t1
# (metrics in RUN/trainer<r>.jsonl, logs in RUN), all made by the caller;
# waits up to 900 s for the master, then kills whatever is left (the hosts
# stay). Returns the master's exit code (124: it outlived the wait).
run_job_on_hosts() {
  local run="$1" keys="$2" n="$3" master="tcp://${ADDR[m]}:5555" master_pid code
  ip netns exec "$PFX-m" "$TESSERA_ROOT_DIR/scripts/run_master.sh" --config "$run/job.json" --keys "$keys" \
    --bind "$master" --summary_file "$run/summary.json" >"$run/master.log" 2>&1 &
  PIDS+=($!)
  master_pid=$!
  for ((i = 0; i < n; i++)); do
    ip netns exec "$PFX-p$i" "$TESSERA_ROOT_DIR/scripts/run_ps.sh" --master "$master" --keys "$keys" \
      --bind tcp://0.0.0.0:0 >"$run/ps$i.log" 2>&1 &
    PIDS+=($!)
  done
  for r in 0 1; do
    ip netns exec "$PFX-t$r" "$TESSERA_ROOT_DIR/scripts/run_trainer.sh" --master "$master" --keys "$keys" --rank $r \
      --world 2 --metrics_file "$run/trainer$r.jsonl" >"$run/trainer$r.log" 2>&1 &
    PIDS+=($!)
  done
  wait_pid "$master_pid" 900
  code=$?
  kill_started
  return $code
}

remove_hosts() {
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  NAMESPACES=()
}

# bench_job_setup KEYS, for a bench that runs jobs on test hosts: when the
# script exits (also after Ctrl-C), what it started is killed and its hosts
# removed; the job gets new keys in KEYS.
bench_job_setup() {
  trap 'kill_started; remove_hosts' EXIT
  trap 'exit 130' INT TERM
  rm -rf "$1"
  "$TESSERA_ROOT_DIR/scripts/make_job_keys.sh" "$1" >/dev/null
}

# wait_for FILE PATTERN SECONDS: whether PATTERN appeared in FILE in time.
wait_for() {
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# wait_pid PID SECONDS: its exit code, or 124 (killed) when it outlived SECONDS.
wait_pid() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; return 124; fi
  wait "$1"
}

# criteo_config OUT CKPT_DIR: configs/criteo_dlrm.json for a test (data
# paths absolute; synthetic data, said loudly, where the Criteo sample is
# absent), with checkpoints every 40 steps and a 4 s peer timeout.
criteo_config() {
  python3 - "$ROOT/configs/criteo_dlrm.json" "$1" "$2" <<'PY'
import json, os, sys
src, dst, ckpt = sys.argv[1:]
c = json.load(open(src))
base = os.path.dirname(os.path.abspath(src))
d = c["data"]
for k in ("path", "eval_path"):
    if k in d:
        d[k] = os.path.normpath(os.path.join(base, d[k]))
if not os.path.exists(d["path"]):
    print("NOTE: %s is absent: the test hosts train the same model on SYNTHETIC data" % d["path"])
    d["source"] = "synthetic"
    for k in ("path", "eval_path"):
        d.pop(k, None)
c["checkpoint"] = {"dir": ckpt, "every_steps": 40, "keep": 2}
c["runtime"] = {"heartbeat_ms": 500, "peer_timeout_ms": 4000, "master_reconnect_ms": 20000}
json.dump(c, open(dst, "w"), indent=1)
PY
}
