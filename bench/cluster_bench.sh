#!/usr/bin/env bash
# Adding servers adds bandwidth (issue 14): W2 on test hosts (network
# namespaces, tests/cluster/test_hosts.sh) with 1, 2 and 4 parameter
# servers, each on a host of its own whose link is limited to --rate each
# way (tc tbf), so that the servers' links bound the job. The master and the
# 2 trainers have hosts of their own, with unlimited links.
#
#   bench/cluster_bench.sh [--servers "1 2 4"] [--rate 100mbit] [--steps 300] [--mode async|sync]
#
# Prints per server count: examples/s (trainer 0's steps after a 30-step
# warm-up, from its metrics), the step-time parts (median ms), the bytes
# each server moves per step (both trainers' lookups, replies and pushes,
# from their metrics, over the count) and what its link allows per second,
# and the ratio to linear scaling from 1 server. Results also go to
# run/cluster_bench/results.jsonl (this run's to last_results.jsonl), drawn
# to run/cluster_bench/cluster.png: examples/s against the server count,
# beside linear scaling and what the servers' links allow (needs Debian's
# python3-matplotlib; said when missing). Needs root; binaries from
# $TESSERA_BUILD_DIR (default build/). Removes its namespaces and processes.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
# shellcheck source=../tests/cluster/test_hosts.sh
source "$ROOT/tests/cluster/test_hosts.sh"
SERVERS="1 2 4" RATE=100mbit STEPS=300 MODE=async
while [ $# -gt 0 ]; do
  case "$1" in
    --servers) SERVERS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    *) echo "usage: $0 [--servers \"1 2 4\"] [--rate 100mbit] [--steps 300] [--mode async|sync]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "cluster_bench: needs root (ip netns, tc)" >&2; exit 1; }
require_binaries
OUT="$ROOT/run/cluster_bench"
mkdir -p "$OUT"
LAST="$OUT/last_results.jsonl"  # this run's lines, for its plot
: >"$LAST"
PFX="tcb$(printf '%04x' $(($$ % 65536)))"
bench_job_setup "$OUT/keys" || exit 1  # new keys for every run
echo "cluster_bench: W2 ($MODE), $STEPS steps, server links $RATE each way, $(nproc) CPUs," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"

for n in $SERVERS; do
  HOSTS=(m t0 t1)
  for ((i = 0; i < n; i++)); do HOSTS+=("p$i"); done
  make_hosts || { echo "cluster_bench: could not build the test hosts" >&2; exit 1; }
  for ((i = 0; i < n; i++)); do
    # A queue long enough for a step's burst: the link, not drops, limits.
    tc -n "$PFX-p$i" qdisc add dev e0 root tbf rate "$RATE" burst 256kb latency 400ms
    tc -n "$PFX-sw" qdisc add dev "port-p$i" root tbf rate "$RATE" burst 256kb latency 400ms
  done
  RUN="$OUT/ps$n"
  rm -rf "$RUN" && mkdir -p "$RUN"
  python3 - "$ROOT/bench/configs/w2.json" "$RUN/job.json" "$n" "$STEPS" "$MODE" <<'PY'
import json, sys
src, dst, n, steps, mode = sys.argv[1:]
c = json.load(open(src))
c["cluster"]["num_ps"] = int(n)
c["training"].update(steps=int(steps), consistency=mode)
json.dump(c, open(dst, "w"), indent=1)
PY
  run_job_on_hosts "$RUN" "$OUT/keys" "$n"
  code=$?
  remove_hosts
  if [ $code != 0 ]; then
    echo "cluster_bench: the job on $n server(s) failed (exit $code); see $RUN" >&2
    tail -n 3 "$RUN/master.log" >&2
    exit 1
  fi
  python3 - "$RUN" "$n" "$RATE" "$MODE" <<'PY' | tee -a "$LAST" "$OUT/results.jsonl"
import json, statistics, sys, datetime
run, n, rate, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(run + "/trainer0.jsonl")]
rows += [json.loads(l) for l in open(run + "/trainer1.jsonl")]
steady = [r for r in rows if r["step"] >= 30]
def med(k):
    v = [r[k] for r in steady if k in r]
    return round(statistics.median(v), 1) if v else None
step_ms = med("step_ms")
# Per trainer step, to the servers: its lookups and its push (the gradients
# of the reply's rows: as many bytes as the replies); from them: the replies.
sent = statistics.median(r["lookup_bytes_sent"] + r["lookup_bytes_received"] for r in steady)
received = statistics.median(r["lookup_bytes_received"] for r in steady)
ingress, egress = 2 * sent / n, 2 * received / n  # per server and step, both trainers
units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
unit = next(u for u in units if rate.lower().endswith(u))
link = float(rate.lower()[: -len(unit)]) * units[unit] / 8  # bytes/s each way
print(json.dumps({
    "date": datetime.date.today().isoformat(), "servers": n, "mode": mode, "rate": rate,
    "examples_per_s": round(2 * 512 * 1000 / step_ms), "step_ms": step_ms,
    "lookup_ms": med("lookup_ms"), "dense_ms": med("dense_ms"), "allreduce_ms": med("allreduce_ms"),
    "push_ms": med("push_ms"), "MB_in_per_step_per_server": round(ingress / 1e6, 2),
    "MB_out_per_step_per_server": round(egress / 1e6, 2), "server_link_MB_per_s": round(link / 1e6, 1),
    "link_bound_examples_per_s": round(2 * 512 * link / max(ingress, egress)),
}))
PY
done
python3 - "$OUT/results.jsonl" "$SERVERS" <<'PY'
import json, sys
want = [int(x) for x in sys.argv[2].split()]
rs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rs[r["servers"]] = r  # the newest run of each count
base = rs.get(want[0])
if base:
    for n in want:
        if n in rs:
            r = rs[n]
            print("%d server(s): %6d ex/s, %.2f x %d server(s)'s rate (linear: %.1f), step %.1f ms" %
                  (n, r["examples_per_s"], r["examples_per_s"] / base["examples_per_s"], want[0],
                   n / want[0], r["step_ms"]))
PY

# The picture (Debian's python3-matplotlib; said when missing): examples/s
# against the server count, beside linear scaling and the links' bound.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/cluster.png" --x "servers=parameter servers" \
    --series "examples_per_s=examples/s" --series "link_bound_examples_per_s=what the servers' links allow" \
    --linear "linear scaling from the fewest servers" \
    --title "W2 ($MODE, $STEPS steps), server links $RATE each way: adding servers"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
