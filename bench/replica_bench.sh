#!/usr/bin/env bash
# What replicas cost and what they buy (issue 12): W2 (bench/configs/w2.json:
# 8 tables of 200,000 x 64 on 2 servers, 2 trainers, batch 512) with
# cluster.replicas 1 and 2, one after the other, R times; then one run with
# replicas 2 on 3 servers where a server is killed (SIGKILL) mid-job, timed
# from the kill to the master's "promoted" line and to the next step, and
# the pause at the boundary that gives the plan its backups back, with and
# without runtime.precopy.
#
#   bench/replica_bench.sh [--steps N] [--repeats R] [--mode sync|async]
#
# Prints examples/s of each run, the ratio replicas-2 / replicas-1 per pair,
# and the failover times. Binaries from $TESSERA_BUILD_DIR (default build/).
# The pairs also go to run/bench/replica/results.jsonl (this run's to
# last_results.jsonl), drawn, as bench/e2e_bench.sh draws its own, to
# run/bench/replica/replica.png: replicas 2 beside 1, the ratio above (needs
# Debian's python3-matplotlib; said when missing). The runs themselves go to
# a temporary folder, removed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS=200
REPEATS=3
MODE=sync
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT="$(mktemp -d "${TMPDIR:-/tmp}/replica_bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
RESULTS="$ROOT/run/bench/replica"
mkdir -p "$RESULTS"
LAST="$RESULTS/last_results.jsonl"  # this run's lines, for its plot
: >"$LAST"

config() {  # replicas steps file [checkpoint dir]
  python3 - "$ROOT/bench/configs/w2.json" "$3" "$1" "$2" "$MODE" "${4:-}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("cluster", {})["replicas"] = int(sys.argv[3])
c["training"]["steps"] = int(sys.argv[4])
c["training"]["consistency"] = sys.argv[5]
c["training"]["log_every"] = 10
if sys.argv[6]:
    c["checkpoint"] = {"dir": sys.argv[6], "every_steps": 100000}
c.setdefault("runtime", {}).update({"heartbeat_ms": 200, "peer_timeout_ms": 3000})
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}

run() {  # replicas -> examples/s (the job's own figure: steps after warm-up)
  config "$1" "$((STEPS + 20))" "$OUT/r$1.json"
  "$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 --config "$OUT/r$1.json" --run_dir "$OUT/run_r$1" \
    --timeout_s 600 >/dev/null
  python3 -c "import json;print(round(json.load(open('$OUT/run_r$1/summary.json'))['examples_per_s']))"
}

echo "W2, $MODE, $STEPS steps, 2 servers, 2 trainers; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| pair | replicas 1 ex/s | replicas 2 ex/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for i in $(seq 1 "$REPEATS"); do
  one="$(run 1)"
  two="$(run 2)"
  ratio="$(python3 -c "print(f'{$two/$one:.2f}')")"
  echo "| $i | $one | $two | $ratio |"
  echo "{\"date\": \"$(date -I)\", \"workload\": \"w2\", \"mode\": \"$MODE\", \"steps\": $STEPS, \"replicas_1_examples_per_s\": $one, \"replicas_2_examples_per_s\": $two, \"ratio\": $ratio}" | tee -a "$LAST" >>"$RESULTS/results.jsonl"
done

# The picture (Debian's python3-matplotlib; said when missing), drawn as
# bench/e2e_bench.sh draws its own: replicas 2 beside 1, the ratio above.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$RESULTS/replica.png" --series "replicas_2_examples_per_s=replicas 2" \
    --series "replicas_1_examples_per_s=replicas 1" --title "W2 examples/s, replicas 2 vs 1 ($MODE, median of $REPEATS)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi

# Failover: 3 servers, replicas 2, a server killed once training runs;
# twice: with the new backups copied while the job trains (the default,
# runtime.precopy) and without (the boundary moves all their rows).
failover() {  # precopy (true|false)
  local run="$OUT/run_failover_$1"
  config 2 100000 "$OUT/failover_$1.json" "$OUT/ckpt_$1"
  python3 - "$OUT/failover_$1.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["runtime"]["precopy"] = sys.argv[2] == "true"
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
  "$ROOT/scripts/launch_local.sh" --ps 3 --trainers 2 --config "$OUT/failover_$1.json" --run_dir "$run" \
    --timeout_s 600 >/dev/null 2>&1 &
  LAUNCHER=$!
  for _ in $(seq 1 600); do
    [ -f "$run/trainer0.jsonl" ] && [ "$(wc -l <"$run/trainer0.jsonl")" -ge 100 ] && break
    sleep 0.1
  done
  victim="$(pgrep -P "$LAUNCHER" -x tessera_ps | head -n 1)"
  killed_at="$(date +%s.%N)"
  kill -KILL "$victim"
  promoted_at=""
  for _ in $(seq 1 1500); do
    if [ -z "$promoted_at" ] && grep -q "\[master\] promoted" "$run/master.log"; then
      promoted_at="$(date +%s.%N)"
    fi
    # The next boundary gives the plan its backups back: training pauses
    # while the rows they still need move.
    grep -q "^I.*generation 3: " "$run/master.log" && break
    sleep 0.02
  done
  kill -TERM "$LAUNCHER" 2>/dev/null || true
  wait "$LAUNCHER" 2>/dev/null || true
  echo
  echo "precopy: $1"
  grep -F "[master] lost" "$run/master.log" | cut -c1-160 || true
  grep -F "[master] promoted" "$run/master.log" || true
  grep -F "[master] migration at step" "$run/master.log" || true
  grep -F "[master] the trainers paused" "$run/master.log" || true
  # When trainer 0 sent its step again under the new plan, and when the
  # backups were back: glog's timestamps (the metrics file is buffered).
  python3 - "$killed_at" "${promoted_at:-0}" "$run/trainer0.log" "$run/master.log" <<'PY'
import datetime, re, sys
killed, promoted = float(sys.argv[1]), float(sys.argv[2])
def first(path, text):
    for line in open(path, errors="replace"):
        if text in line:
            m = re.match(r"[IWE](\d{8}) (\d\d:\d\d:\d\d\.\d+)", line)
            if m:
                t = datetime.datetime.strptime(m.group(1) + " " + m.group(2), "%Y%m%d %H:%M:%S.%f")
                return t.timestamp()
    return None
resumed = first(sys.argv[3], "backups took over; generation")
rebuilt = first(sys.argv[4], "generation 3: ")
out = []
if promoted: out.append(f"kill -> promoted {promoted - killed:.2f} s")
if resumed: out.append(f"kill -> trainer 0 goes on with its step {resumed - killed:.2f} s")
if rebuilt: out.append(f"kill -> backups rebuilt {rebuilt - killed:.2f} s")
print("failover: " + (", ".join(out) if out else "not seen (see the master log above)"))
PY
}
failover true
failover false
