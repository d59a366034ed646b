#!/usr/bin/env bash
# What summing the dense gradients in buckets during the backward pass buys
# (issue 15; trainer/bucketed_allreduce.h) when the trainers' own links are
# slow: W1 or W2 in sync mode on test hosts (network namespaces,
# tests/cluster/test_hosts.sh), the 2 trainers' links limited to --rate each
# way (tc tbf; "none": unlimited, where the cores bound the job), the master
# and the servers unlimited. Each round runs the job
# once per --buckets value (training.allreduce_bucket_bytes; 0 = one
# allreduce after the backward), in turn, so that the machine's noise falls
# on all alike.
#
#   bench/overlap_bench.sh [--workload w1|w2] [--rate 500mbit] [--steps 300]
#                          [--rounds 3] [--buckets "0 262144"]
#
# Prints per run: examples/s (both trainers' steps after a 30-step warm-up,
# from their metrics) and the step's parts (median ms); at the end the
# median examples/s of each bucket size and its ratio to the first. Lines
# also go to run/overlap_bench/results.jsonl. Needs root; binaries from
# $TESSERA_BUILD_DIR (default build/). Removes its namespaces and processes.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
# shellcheck source=../tests/cluster/test_hosts.sh
source "$ROOT/tests/cluster/test_hosts.sh"
WORKLOAD=w2 RATE=500mbit STEPS=300 ROUNDS=3 BUCKETS="0 262144"
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) WORKLOAD="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --buckets) BUCKETS="$2"; shift 2 ;;
    *) echo "usage: $0 [--workload w1|w2] [--rate 500mbit] [--steps 300] [--rounds 3] [--buckets \"0 262144\"]" >&2
       exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "overlap_bench: needs root (ip netns, tc)" >&2; exit 1; }
[ -f "$ROOT/bench/configs/$WORKLOAD.json" ] || { echo "overlap_bench: no bench/configs/$WORKLOAD.json" >&2; exit 2; }
require_binaries
OUT="$ROOT/run/overlap_bench"
mkdir -p "$OUT"
LAST="$OUT/last_results.jsonl"
: >"$LAST"
PFX="tob$(printf '%04x' $(($$ % 65536)))"
bench_job_setup "$OUT/keys" || exit 1  # new keys for every run
echo "overlap_bench: $WORKLOAD (sync), $STEPS steps, trainer links $RATE each way, $(nproc) CPUs," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"

for ((round = 1; round <= ROUNDS; round++)); do
  for bucket in $BUCKETS; do
    HOSTS=(m p0 p1 t0 t1)
    make_hosts || { echo "overlap_bench: could not build the test hosts" >&2; exit 1; }
    for r in 0 1; do
      [ "$RATE" = none ] && break
      tc -n "$PFX-t$r" qdisc add dev e0 root tbf rate "$RATE" burst 256kb latency 400ms
      tc -n "$PFX-sw" qdisc add dev "port-t$r" root tbf rate "$RATE" burst 256kb latency 400ms
    done
    RUN="$OUT/b$bucket-r$round"
    rm -rf "$RUN" && mkdir -p "$RUN"
    python3 - "$ROOT/bench/configs/$WORKLOAD.json" "$RUN/job.json" "$STEPS" "$bucket" <<'PY'
import json, sys
src, dst, steps, bucket = sys.argv[1:]
c = json.load(open(src))
c["cluster"]["num_ps"] = 2
c["training"].update(steps=int(steps), consistency="sync", allreduce_bucket_bytes=int(bucket))
json.dump(c, open(dst, "w"), indent=1)
PY
    run_job_on_hosts "$RUN" "$OUT/keys" 2
    code=$?
    remove_hosts
    if [ $code != 0 ]; then
      echo "overlap_bench: the job with buckets of $bucket bytes failed (exit $code); see $RUN" >&2
      tail -n 3 "$RUN/master.log" >&2
      exit 1
    fi
    python3 - "$RUN" "$WORKLOAD" "$RATE" "$bucket" "$round" <<'PY' | tee -a "$LAST" "$OUT/results.jsonl"
import json, statistics, sys, datetime
run, workload, rate, bucket, rnd = sys.argv[1:]
rows = [json.loads(l) for r in (0, 1) for l in open("%s/trainer%d.jsonl" % (run, r))]
steady = [r for r in rows if r["step"] >= 30]
batch = json.load(open(run + "/job.json"))["training"]["batch_size"]  # per trainer
def med(k):
    v = [r[k] for r in steady if k in r]
    return round(statistics.median(v), 2) if v else None
print(json.dumps({
    "date": datetime.date.today().isoformat(), "workload": workload, "rate": rate,
    "allreduce_bucket_bytes": int(bucket), "round": int(rnd),
    "examples_per_s": round(2 * batch * 1000 / med("step_ms")), "step_ms": med("step_ms"),
    "lookup_ms": med("lookup_ms"), "dense_ms": med("dense_ms"), "allreduce_ms": med("allreduce_ms"),
    "push_ms": med("push_ms"),
}))
PY
  done
done
python3 - "$LAST" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
sizes = list(dict.fromkeys(r["allreduce_bucket_bytes"] for r in rs))
meds = {b: statistics.median(r["examples_per_s"] for r in rs if r["allreduce_bucket_bytes"] == b) for b in sizes}
for b in sizes:
    print("buckets of %d bytes%s: median %d ex/s, %.2f x the first" %
          (b, " (one allreduce after the backward)" if b == 0 else "", meds[b], meds[b] / meds[sizes[0]]))
PY
