#!/usr/bin/env bash
# What a checkpoint costs: the same job trained without checkpoints and with
# one every K steps, back to back (runs alternate, so noise on this shared
# machine hits both alike). Prints, for each pair: examples/s of each and
# their ratio (the measured cost), and per checkpoint the pause the trainers
# saw, the bytes written and where the pause went; last, what a checkpoint
# every N steps costs per step, from the pause and the step time.
#
#   bench/checkpoint_bench.sh [--workload w1|w2|toy] [--steps S] [--every K] [--repeats R]
#                             [--mode async|sync] [--intervals "N ..."] [--no_build]
#
# Workloads (bench/configs/<name>.json): W1 and W2 are e2e_bench.sh's; W2
# (default) is 8 tables of 200,000 x 64 on 2 servers and 2 trainers, batch
# 512 bags of 20 Zipf(1.05) ids per trainer, async; by step 100 most of its
# rows exist, so a checkpoint writes nearly the whole model (~400 MB). toy is
# the integration tests' job (4 tiny tables, sync, steps of a few ms): what a
# checkpoint costs when there is next to nothing to write. --mode overrides
# the config's consistency. The binaries come from $TESSERA_BUILD_DIR
# (default build/). Checkpoints go to run/bench/checkpoint/ckpt; results to
# run/bench/checkpoint/results.jsonl (this run's to last_results.jsonl),
# drawn, as bench/e2e_bench.sh draws its own, to
# run/bench/checkpoint/checkpoint.png: examples/s with checkpoints beside
# without, the ratio above, and beside them the pause per checkpoint (needs
# Debian's python3-matplotlib; said when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORKLOAD=w2
STEPS=400
EVERY=100
REPEATS=1
MODE=""
INTERVALS="100 500 1000 2000"
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) WORKLOAD="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --every) EVERY="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --intervals) INTERVALS="$2"; shift 2 ;;
    --no_build) BUILD=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$BUILD" = 1 ]; then
  "$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer >/dev/null
fi
OUT="$ROOT/run/bench/checkpoint"
mkdir -p "$OUT"
PS=$(python3 -c "import json;print(json.load(open('$ROOT/bench/configs/$WORKLOAD.json')).get('cluster', {}).get('num_ps', 1))")

config() {  # every_steps (0: no checkpoint.dir) -> path of the job config
  local cfg="$OUT/$WORKLOAD-$1.json"
  python3 - "$ROOT/bench/configs/$WORKLOAD.json" "$cfg" "$STEPS" "$MODE" "$1" "$OUT/ckpt" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["training"]["steps"] = int(sys.argv[3])
if sys.argv[4]:
    c["training"]["consistency"] = sys.argv[4]
if int(sys.argv[5]) > 0:
    c["checkpoint"] = {"dir": sys.argv[6], "every_steps": int(sys.argv[5]), "keep": 2}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  echo "$cfg"
}

run() {  # every_steps -> the run's folder
  local dir="$OUT/$WORKLOAD-$1"
  rm -rf "$dir" "$OUT/ckpt"
  "$ROOT/scripts/launch_local.sh" --ps "$PS" --trainers 2 --config "$(config "$1")" --run_dir "$dir" >/dev/null
  echo "$dir"
}

echo "$WORKLOAD, ${MODE:-consistency as configured}, $STEPS steps, checkpoints every $EVERY steps; load average $(cut -d' ' -f1-3 /proc/loadavg)"
LAST="$OUT/last_results.jsonl"  # this run's lines, for its plot and the medians
: >"$LAST"
for _ in $(seq 1 "$REPEATS"); do
  off=$(run 0)
  on=$(run "$EVERY")
  python3 - "$off" "$on" "$OUT/ckpt" "$INTERVALS" "$WORKLOAD" "$STEPS" "$EVERY" "$LAST" <<'PY'
import glob, json, os, sys, datetime
off_dir, on_dir, ckpt_root = sys.argv[1:4]
intervals = [int(n) for n in sys.argv[4].split()]
workload, steps, every = sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
off, on = (json.load(open(os.path.join(d, "summary.json"))) for d in (off_dir, on_dir))
job = json.load(open(on_dir + ".json"))
global_batch = job["training"]["batch_size"] * job["cluster"]["num_trainers"]
step_s = global_batch / off["examples_per_s"]

def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)

def idle_s(d):
    """Trainer 0's time outside its steps: its wall time less the sum of step_ms."""
    wall = next(t["wall_s"] for t in json.load(open(os.path.join(d, "summary.json")))["trainers"] if t["rank"] == 0)
    return wall - sum(json.loads(l)["step_ms"] for l in open(os.path.join(d, "trainer0.jsonl"))) / 1e3

cks = on.get("checkpoints", [])
# Older builds recorded only "seconds" (no pause, no bytes): fall back to
# those, and to the size on disk of the checkpoints still there.
on_disk = {int(os.path.basename(d)[5:]): dir_bytes(d) for d in glob.glob(os.path.join(ckpt_root, "ckpt-*"))}
print("%6s %9s %10s   %s" % ("step", "pause_s", "MB", "where the pause went (s)"))
for c in cks:
    b = c.get("bytes", on_disk.get(c["step"]))
    parts = " ".join("%s %.3f" % (k[:-2], c[k]) for k in
                     ("barrier_wait_s", "snapshot_s", "trainer_state_s", "manifest_s") if k in c)
    servers = " | ".join("ps%d %.3f: write %.3f sync %.3f, %d rows" % (
        i, s["seconds"], s["write_s"], s["sync_s"], s["rows"]) for i, s in enumerate(c.get("servers", [])))
    print("%6d %9.3f %10s   %s%s" % (c["step"], c.get("pause_s", c["seconds"]),
                                     "%.1f" % (b / 1e6) if b is not None else "?", parts,
                                     ("  [" + servers + "]") if servers else ""))
ratio = on["examples_per_s"] / off["examples_per_s"]
print("examples/s: without checkpoints %.0f, with one every %d steps %.0f: ratio %.3f" %
      (off["examples_per_s"], every, on["examples_per_s"], ratio))
result = {"date": datetime.date.today().isoformat(), "workload": workload,
          "mode": job["training"].get("consistency", "sync"), "steps": steps, "every": every,
          "off_examples_per_s": off["examples_per_s"], "on_examples_per_s": on["examples_per_s"], "ratio": ratio,
          "step_s": step_s, "checkpoints": cks}
if cks:
    # The last checkpoint holds the most rows: the steady state of a long job.
    last = cks[-1]
    result["pause_s"] = last.get("pause_s", last["seconds"])
    result["bytes"] = last.get("bytes", on_disk.get(last["step"]))
    # What the trainers lost per checkpoint, step times aside (those move
    # with the machine's noise): their time outside steps, less the same in
    # the run without checkpoints.
    result["trainer_pause_s"] = (idle_s(on_dir) - idle_s(off_dir)) / len(cks)
    print("step %.1f ms; last checkpoint: pause %.3f s (%.0f steps), %.1f MB; trainer 0 lost %.3f s per checkpoint" %
          (1e3 * step_s, result["pause_s"], result["pause_s"] / step_s, (result["bytes"] or 0) / 1e6,
           result["trainer_pause_s"]))
print(json.dumps(result), file=open(sys.argv[8], "a"))
print(json.dumps(result), file=open(os.path.join(os.path.dirname(sys.argv[8]), "results.jsonl"), "a"))
PY
done
python3 - "$LAST" "$INTERVALS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
intervals = [int(n) for n in sys.argv[2].split()]
med = lambda k: statistics.median(r[k] for r in runs)
print("\nover %d pair(s), medians: ratio %.3f; step %.1f ms" % (len(runs), med("ratio"), 1e3 * med("step_s")), end="")
if all("pause_s" in r for r in runs):
    pause, step = med("pause_s"), med("step_s")
    print("; pause %.3f s, trainer-seen %.3f s; %.1f MB per checkpoint" %
          (pause, med("trainer_pause_s"), med("bytes") / 1e6))
    print("pause per step at an interval of N steps (pause / (N x step time)):")
    for n in intervals:
        print("  every %5d steps: %5.2f%%" % (n, 100 * pause / (n * step)))
else:
    print()
PY

# The picture (Debian's python3-matplotlib; said when missing), drawn as
# bench/e2e_bench.sh draws its own: examples/s with checkpoints beside
# without, the ratio above; beside them, what each checkpoint paused.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/checkpoint.png" \
    --series "on_examples_per_s=a checkpoint every $EVERY steps" --series "off_examples_per_s=no checkpoints" \
    --panel "pause per checkpoint (s)" --series "pause_s=the last checkpoint's pause" \
    --series "trainer_pause_s=trainer 0's time lost per checkpoint" \
    --title "$WORKLOAD, $STEPS steps: what a checkpoint costs (median of $REPEATS)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
