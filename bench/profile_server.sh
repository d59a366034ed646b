#!/usr/bin/env bash
# Where a parameter server's CPU goes (issue 15): runs a bench workload
# through scripts/launch_local.sh, records parameter server 0 with perf for a
# while once the job is past its warm-up, and draws the profile as a flame
# graph (scripts/flamegraph.py; Debian has no flame-graph tool).
#
#   bench/profile_server.sh [--workload w1|w2] [--mode async|sync] [--steps N]
#       [--seconds S] [--frequency HZ] [--call_graph dwarf|fp] [--out PNG] [--no_build]
#
# Defaults: W2 (bench/configs/w2.json: 8 tables of 200,000 x 64 on 2 servers,
# 2 trainers, batch 512 bags of 20 Zipf(1.05) ids), async, 4,000 steps (the
# job must outlast the recording), 10 s at 199 Hz from trainer 0's 100th
# step, DWARF call graphs (the release build keeps no frame pointers; its
# line tables and .eh_frame let perf unwind). Writes, in run/bench/profile/:
# perf.data, perf.txt (perf script), ps0.folded (folded stacks) and the PNG
# (default run/bench/profile/ps0_flame.png); prints the 15 functions with the
# most samples of their own ("self") and the job's examples/s. Needs perf
# (Debian's linux-perf) and python3-matplotlib. Binaries from
# $TESSERA_BUILD_DIR (default build/). Stops what it started.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORKLOAD=w2
MODE=async
STEPS=4000
SECONDS_REC=10
FREQ=199
CALL_GRAPH=dwarf
OUT_DIR="$ROOT/run/bench/profile"
PNG=""
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) WORKLOAD="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --seconds) SECONDS_REC="$2"; shift 2 ;;
    --frequency) FREQ="$2"; shift 2 ;;
    --call_graph) CALL_GRAPH="$2"; shift 2 ;;
    --out) PNG="$2"; shift 2 ;;
    --no_build) BUILD=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$CALL_GRAPH" in
  dwarf) CG=(--call-graph "dwarf,16384") ;;
  fp) CG=(-g) ;;
  *) echo "--call_graph: dwarf or fp, not $CALL_GRAPH" >&2; exit 2 ;;
esac
[ -f "$ROOT/bench/configs/$WORKLOAD.json" ] || { echo "no workload $WORKLOAD in bench/configs" >&2; exit 2; }
command -v perf >/dev/null || { echo "perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 2; }
/usr/bin/python3 -c "import matplotlib" 2>/dev/null ||
  { echo "python3-matplotlib is not installed (Debian: apt-get install python3-matplotlib)" >&2; exit 2; }
[ -n "$PNG" ] || PNG="$OUT_DIR/ps0_flame.png"
if [ "$BUILD" = 1 ]; then
  "$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer >/dev/null
fi

mkdir -p "$OUT_DIR"
RUN="$OUT_DIR/job"
rm -rf "$RUN"
CFG="$OUT_DIR/$WORKLOAD.json"
python3 - "$ROOT/bench/configs/$WORKLOAD.json" "$CFG" "$STEPS" "$MODE" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["training"]["steps"] = int(sys.argv[3])
c["training"]["consistency"] = sys.argv[4]
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
NUM_PS=1
[ "$WORKLOAD" = w2 ] && NUM_PS=2

"$ROOT/scripts/launch_local.sh" --ps "$NUM_PS" --trainers 2 --config "$CFG" --run_dir "$RUN" >"$OUT_DIR/launch.log" 2>&1 &
LAUNCHER=$!
cleanup() {
  if kill -0 "$LAUNCHER" 2>/dev/null; then
    kill "$LAUNCHER" 2>/dev/null || true  # launch_local stops the job's processes
    wait "$LAUNCHER" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# Server 0: the launcher's descendant named tessera_ps whose log is ps0.log
# (launch_local starts the servers in index order: the lowest pid).
descendants() {  # pid -> its descendants' "pid comm" lines
  ps -e -o pid=,ppid=,comm= | awk -v root="$1" '
    { parent[$1] = $2; comm[$1] = $3 }
    END { for (p in parent) { q = p; while (q in parent && q != root && q > 1) q = parent[q];
          if (q == root && p != root) print p, comm[p] } }'
}
deadline=$((SECONDS + 120))
until [ -f "$RUN/trainer0.jsonl" ] && [ "$(wc -l <"$RUN/trainer0.jsonl")" -ge 100 ]; do
  if ! kill -0 "$LAUNCHER" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    echo "the job did not reach step 100 (within 120 s); $OUT_DIR/launch.log:" >&2
    tail -n 20 "$OUT_DIR/launch.log" >&2
    exit 1
  fi
  sleep 0.5
done
PS_PID="$(descendants "$LAUNCHER" | awk '$2 == "tessera_ps" { print $1 }' | sort -n | head -n 1)"
[ -n "$PS_PID" ] || { echo "no tessera_ps process under the launcher (pid $LAUNCHER)" >&2; exit 1; }
echo "recording parameter server 0 (pid $PS_PID) for $SECONDS_REC s at $FREQ Hz ($CALL_GRAPH call graphs)"
perf record -q -F "$FREQ" "${CG[@]}" -p "$PS_PID" -o "$OUT_DIR/perf.data" -- sleep "$SECONDS_REC" 2>"$OUT_DIR/perf.log" ||
  { echo "perf record failed:" >&2; cat "$OUT_DIR/perf.log" >&2; exit 1; }
if ! kill -0 "$PS_PID" 2>/dev/null; then
  echo "server 0 ended while it was recorded: raise --steps so that the job outlasts the recording" >&2
  exit 1
fi
# The job is not needed any more; its examples/s so far are in trainer 0's metrics.
EXAMPLES_PER_S="$(python3 - "$RUN/trainer0.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "examples_per_s" in r][50:]
print(round(statistics.median(r["examples_per_s"] for r in rows) * 2) if rows else "n/a")
PY
)"
cleanup
perf script -i "$OUT_DIR/perf.data" >"$OUT_DIR/perf.txt" 2>>"$OUT_DIR/perf.log"
"$ROOT/scripts/flamegraph.py" "$OUT_DIR/perf.txt" --out "$PNG" --folded "$OUT_DIR/ps0.folded" \
  --title "parameter server 0 of $WORKLOAD ($MODE), $SECONDS_REC s at $FREQ Hz: where its CPU goes"
echo "examples/s of the job while recorded (2 x trainer 0's median): $EXAMPLES_PER_S"
# Self samples: the leaf of each stack, summed per function; and each thread's share.
python3 - "$OUT_DIR/ps0.folded" <<'PY'
import collections, sys
self_n, thread_n, total = collections.Counter(), collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    frames, n = stack.split(";"), int(n)
    self_n[frames[-1]] += n
    thread_n[frames[0]] += n
    total += n
print("threads:", ", ".join("%s %.1f%%" % (t, 100.0 * n / total) for t, n in thread_n.most_common(8)))
print("%6s  %s" % ("self", "function"))
for name, n in self_n.most_common(15):
    print("%5.1f%%  %s" % (100.0 * n / total, name))
PY
