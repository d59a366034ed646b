#!/usr/bin/env bash
# A job spread over test hosts (issue 14): every role in its own network
# namespace with its own address, joined by veth pairs to a bridge, started
# with the same scripts/run_*.sh a user runs, each finding the address it
# advertises from its route to the master (no --advertise_host, no --host).
#
#   tests/cluster/netns_test.sh [--cases "equal rate cut_short cut_long lossy"]
#
# The job is configs/criteo_dlrm.json (the REFERENCE Criteo job, sync, on
# ../shared/data/criteo_kaggle_8k; where that data is absent it says so and
# runs the same model on synthetic data) with a checkpoint every 40 steps.
# Each case runs it on 5 hosts (master, 2 servers, 2 trainers) and compares
# the final parameters (tessera_compare_dumps) and trainer 0's losses with
# the same job run once on one host's loopback:
#   equal      as it is: the same parameters (<= 1e-5) and losses;
#   rate       every server's link limited to 200 Mbit/s each way (tc tbf):
#              the same;
#   cut_short  server 1's link down for 1.5 s mid-job (less than
#              runtime.peer_timeout_ms, 4 s): TCP carries on, the same;
#   cut_long   server 1's link down for 8 s: the master finds it lost,
#              recovers on server 0 from the newest checkpoint, and the job
#              ends with the same parameters; server 1 is fenced;
#   lossy      the servers on a segment of their own, joined to the others'
#              only by tests/cluster/hop.py, a forwarding hop that holds every
#              frame 2 ms and drops 1% of them (seeded): this kernel has no
#              netem, so the hop injects the delay and the loss. TCP
#              retransmits; the job ends the same.
#
# Needs root (ip netns, tc); exits 77 (skipped) otherwise. Uses only
# addresses inside its own namespaces (10.77.0.0/24) and loopback; creates
# nothing in the caller's namespace. Removes every namespace and kills every
# process it started (by pid) on exit, also on failure. KEEP_TMP=1 keeps the
# logs. Binaries from $TESSERA_BUILD_DIR (default build/). About 2-4 minutes.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
# shellcheck source=test_hosts.sh
source "$ROOT/tests/cluster/test_hosts.sh"
CASES="equal rate cut_short cut_long lossy"
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) CASES="$2"; shift 2 ;;
    *) echo "usage: $0 [--cases \"equal rate cut_short cut_long\"]" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" = 0 ] || skip "the test hosts need root (ip netns, tc); run as root to test across hosts"
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip and tc (iproute2) are not installed"
command -v ethtool >/dev/null || skip "ethtool is not installed (the lossy link needs offloads off)"
require_binaries

# Names unique to this run: namespaces tsc<id>-<host>; interface names stay
# under 15 characters.
ID="$(printf '%04x' $(($$ % 65536)))"
PFX="tsc$ID"
HOSTS=(m p0 p1 t0 t1)  # 10.77.0.1 to .5
TMP="$(mktemp -d "${TMPDIR:-/tmp}/netns_test.XXXXXX")"
PIDS=()
FAILURES=0

cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  remove_hosts
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run NAME NAMESPACE CMD...: starts CMD in NAMESPACE, output in $RUN/NAME.log.
run() {
  local name="$1" ns="$2"
  shift 2
  ip netns exec "$ns" "$@" >"$RUN/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# The job: the REFERENCE Criteo job, checkpoints every 40 steps, a peer
# timeout the cuts are measured against.
CONFIG="$TMP/job.json"
criteo_config "$CONFIG" "$TMP/ckpt" || exit 1
"$ROOT/scripts/make_job_keys.sh" "$TMP/keys" >/dev/null || { echo "FAIL: make_job_keys.sh"; exit 1; }
make_hosts_and_reference

# job NAME MODE [DURING]: runs the job; MODE loopback (every role on one
# host's 127.0.0.1) or hosts (one role per host). DURING, when given, is run
# once trainer 0 has logged 60 steps. Sets RUN; returns the master's code.
job() {
  local name="$1" mode="$2" during="${3:-}"
  RUN="$TMP/$name"
  mkdir -p "$RUN"
  rm -rf "$TMP/ckpt"
  local master_ns="$PFX-lo" m_host=127.0.0.1
  [ "$mode" = hosts ] && master_ns="$PFX-m" && m_host="${ADDR[m]}"
  local master="tcp://$m_host:5555" bind="tcp://$m_host:5555"
  run master "$master_ns" "$ROOT/scripts/run_master.sh" --config "$CONFIG" --keys "$TMP/keys" --bind "$bind" \
    --dump_dir "$RUN/dump" --summary_file "$RUN/summary.json"
  wait_for "$RUN/master.log" "listening on" 20 || { echo "FAIL: $name: the master did not start"; return 1; }
  for i in 0 1; do
    local ns="$PFX-lo" ps_bind="tcp://127.0.0.1:0"
    # Servers bind every interface and find the address to advertise.
    [ "$mode" = hosts ] && ns="$PFX-p$i" && ps_bind="tcp://0.0.0.0:0"
    run "ps$i" "$ns" "$ROOT/scripts/run_ps.sh" --master "$master" --keys "$TMP/keys" --bind "$ps_bind"
  done
  for r in 0 1; do
    local ns="$PFX-lo"
    [ "$mode" = hosts ] && ns="$PFX-t$r"
    run "trainer$r" "$ns" "$ROOT/scripts/run_trainer.sh" --master "$master" --keys "$TMP/keys" --rank "$r" \
      --world 2 --metrics_file "$RUN/trainer$r.jsonl"
  done
  if [ -n "$during" ]; then
    if wait_for "$RUN/trainer0.jsonl" '"step":60,' 240; then
      $during
    else
      echo "FAIL: $name: trainer 0 did not reach step 60"; return 1
    fi
  fi
  wait_pid "$PID_master" 600
}

# same NAME: the job in $RUN ended well and equals the loopback run.
same() {
  local name="$1" ok=1
  if ! grep -q "' finished in" "$RUN/master.log"; then
    echo "FAIL: $name: the job did not finish:"; tail -n 5 "$RUN/master.log"; FAILURES=$((FAILURES + 1)); return
  fi
  if ! "$COMPARE" --config "$CONFIG" --a "$TMP/loopback/dump" --b "$RUN/dump" --tolerance 1e-5 >"$RUN/compare.out" 2>&1; then
    echo "FAIL: $name: parameters differ from the loopback run:"; cat "$RUN/compare.out"; ok=0
  fi
  # Trainer 0's loss at every step it ended last (a rolled-back run logs
  # replayed steps twice: the last of each counts).
  if ! python3 - "$TMP/loopback/trainer0.jsonl" "$RUN/trainer0.jsonl" <<'PY'; then
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        j = json.loads(line)
        out[j["step"]] = j["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
bad = [s for s in a if s not in b or abs(a[s] - b[s]) > 1e-5]
if bad or len(a) != len(b):
    print("losses differ at %d of %d steps (first: %s)" % (len(bad), len(a), bad[:3]))
    sys.exit(1)
PY
    echo "FAIL: $name: trainer 0's losses differ from the loopback run"; ok=0
  fi
  if [ $ok = 1 ]; then echo "PASS: $name: $(tail -n 1 "$RUN/compare.out")"; else FAILURES=$((FAILURES + 1)); fi
}

job loopback loopback
code=$?
[ $code = 0 ] && grep -q "' finished in" "$RUN/master.log" || {
  echo "FAIL: the loopback run (exit $code):"; tail -n 20 "$RUN/master.log"; exit 1; }
echo "PASS: loopback reference run: $(grep -c . "$RUN/trainer0.jsonl") steps logged"

for c in $CASES; do
  case "$c" in
    equal)
      job equal hosts
      # Each server advertised its own host's address, found from its route.
      for i in 0 1; do
        grep -q "(tcp://${ADDR[p$i]}:" "$RUN/ps$i.log" ||
          { echo "FAIL: equal: ps$i did not advertise ${ADDR[p$i]}:"; grep "registered" "$RUN/ps$i.log"; FAILURES=$((FAILURES + 1)); }
      done
      same equal ;;
    rate)
      for i in 0 1; do
        tc -n "$PFX-p$i" qdisc add dev e0 root tbf rate 200mbit burst 256kb latency 50ms
        tc -n "$PFX-sw" qdisc add dev "port-p$i" root tbf rate 200mbit burst 256kb latency 50ms
      done
      job rate hosts
      for i in 0 1; do
        tc -n "$PFX-p$i" qdisc del dev e0 root
        tc -n "$PFX-sw" qdisc del dev "port-p$i" root
      done
      same rate ;;
    cut_short)
      cut_short() { ip -n "$PFX-p1" link set e0 down; sleep 1.5; ip -n "$PFX-p1" link set e0 up; }
      job cut_short hosts cut_short
      grep -q "lost parameter server" "$RUN/master.log" &&
        { echo "FAIL: cut_short: a 1.5 s cut was taken for a lost server"; FAILURES=$((FAILURES + 1)); }
      same cut_short ;;
    cut_long)
      cut_long() { ip -n "$PFX-p1" link set e0 down; sleep 8; ip -n "$PFX-p1" link set e0 up; }
      job cut_long hosts cut_long
      if grep -q "lost parameter server" "$RUN/master.log" && grep -q "recovered" "$RUN/master.log"; then
        echo "PASS: cut_long: $(grep -o 'lost parameter server[^;]*' "$RUN/master.log" | head -n 1)"
      else
        echo "FAIL: cut_long: the master did not find server 1 lost and recover:"; tail -n 5 "$RUN/master.log"
        FAILURES=$((FAILURES + 1))
      fi
      # Back on the wire, the cut-off server is no member any more: it stops.
      wait_pid "$PID_ps1" 30
      [ $? = 124 ] && { echo "FAIL: cut_long: server 1 still runs after the job"; FAILURES=$((FAILURES + 1)); }
      same cut_long ;;
    lossy)
      # The servers' segment (br1) and the others' (br0) meet only at the hop.
      ip -n "$PFX-sw" link add br1 type bridge && ip -n "$PFX-sw" link set br1 up
      ns_add "$PFX-hop"
      for side in a b; do
        ip -n "$PFX-hop" link add "side$side" type veth peer name "hop-$side" netns "$PFX-sw" 
        ip -n "$PFX-hop" link set "side$side" up
      done
      ip -n "$PFX-sw" link set hop-a master br0 up
      ip -n "$PFX-sw" link set hop-b master br1 up
      for i in 0 1; do ip -n "$PFX-sw" link set "port-p$i" master br1; done
      # Frames no larger than the MTU, with their checksums filled in (no
      # offloads), so that the hop can send them on as they are.
      for h in "${HOSTS[@]}"; do ip netns exec "$PFX-$h" ethtool -K e0 tx off tso off gso off gro off >/dev/null 2>&1; done
      for side in a b; do ip netns exec "$PFX-hop" ethtool -K "side$side" tx off gro off >/dev/null 2>&1; done
      ip netns exec "$PFX-hop" python3 "$ROOT/tests/cluster/hop.py" --a sidea --b sideb --delay_ms 2 --loss 0.01 \
        --seed 14 --stats "$TMP/hop.json" >"$TMP/hop.log" 2>&1 &
      hop_pid=$!
      PIDS+=($hop_pid)
      job lossy hosts
      kill -TERM "$hop_pid" 2>/dev/null
      wait "$hop_pid" 2>/dev/null
      if python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c["dropped"] > 0 and c["forwarded"] > 0 and c["too_big"] == 0 else 1)' "$TMP/hop.json" 2>/dev/null; then
        echo "PASS: lossy: the hop forwarded and dropped $(cat "$TMP/hop.json")"
      else
        echo "FAIL: lossy: the hop did not work: $(cat "$TMP/hop.json" "$TMP/hop.log" 2>&1)"; FAILURES=$((FAILURES + 1))
      fi
      same lossy ;;
    *) echo "FAIL: unknown case $c"; FAILURES=$((FAILURES + 1)) ;;
  esac
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  PIDS=()
done

if [ $FAILURES -gt 0 ]; then
  echo "netns_test: $FAILURES failure(s)"
  KEEP_TMP=1
  exit 1
fi
echo "netns_test: all passed"
