#!/usr/bin/env bash
# What prefetch buys as the round trip grows (issue 14): W1 (async) on test
# hosts, the server on a segment of its own that reaches the trainers and
# the master only through tests/cluster/hop.py, a forwarding hop that holds
# every frame D ms (no loss), with and without training.prefetch, for each D.
#
#   bench/delay_bench.sh [--delays "0 0.5 2 5"] [--steps 220]
#
# D is added each way: the round trip grows by 2 D. Prints examples/s
# (median step of both trainers after a 20-step warm-up) for each D with and
# without prefetch, and their ratio. The hop is a Python forwarder on this
# machine's 2 cores: with D = 0 it still costs what forwarding costs, so
# compare the two columns at one D, and each D with D = 0. Results also go
# to run/delay_bench/results.jsonl (this run's to last_results.jsonl), drawn
# to run/delay_bench/delay.png: examples/s and the lookup wait against D,
# with and without prefetch (needs Debian's python3-matplotlib; said when
# missing). Needs root; binaries from $TESSERA_BUILD_DIR (default build/).
# Removes its namespaces and processes.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
# shellcheck source=../tests/cluster/test_hosts.sh
source "$ROOT/tests/cluster/test_hosts.sh"
DELAYS="0 0.5 2 5" STEPS=220
while [ $# -gt 0 ]; do
  case "$1" in
    --delays) DELAYS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "usage: $0 [--delays \"0 0.5 2 5\"] [--steps 220]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "delay_bench: needs root (ip netns)" >&2; exit 1; }
command -v ethtool >/dev/null || { echo "delay_bench: needs ethtool" >&2; exit 1; }
require_binaries
OUT="$ROOT/run/delay_bench"
mkdir -p "$OUT"
LAST="$OUT/last_results.jsonl"  # this run's lines, for its plot
: >"$LAST"
PFX="tdb$(printf '%04x' $(($$ % 65536)))"
HOSTS=(m p0 t0 t1)
bench_job_setup "$OUT/keys" || exit 1  # new keys for every run
echo "delay_bench: W1 (async), $STEPS steps, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The hosts, the server's segment behind the hop (as in tests/cluster/netns_test.sh's lossy case).
make_hosts || { echo "delay_bench: could not build the test hosts" >&2; exit 1; }
ip -n "$PFX-sw" link add br1 type bridge && ip -n "$PFX-sw" link set br1 up
ns_add "$PFX-hop"
for side in a b; do
  ip -n "$PFX-hop" link add "side$side" type veth peer name "hop-$side" netns "$PFX-sw"
  ip -n "$PFX-hop" link set "side$side" up
  ip netns exec "$PFX-hop" ethtool -K "side$side" tx off gro off >/dev/null 2>&1
done
ip -n "$PFX-sw" link set hop-a master br0 up
ip -n "$PFX-sw" link set hop-b master br1 up
ip -n "$PFX-sw" link set port-p0 master br1
for h in "${HOSTS[@]}"; do ip netns exec "$PFX-$h" ethtool -K e0 tx off tso off gso off gro off >/dev/null 2>&1; done

for d in $DELAYS; do
  ip netns exec "$PFX-hop" python3 "$ROOT/tests/cluster/hop.py" --a sidea --b sideb --delay_ms "$d" --loss 0 \
    >"$OUT/hop.log" 2>&1 &
  hop_pid=$!
  for prefetch in false true; do
    RUN="$OUT/d${d}_prefetch_$prefetch"
    rm -rf "$RUN" && mkdir -p "$RUN"
    python3 - "$ROOT/bench/configs/w1.json" "$RUN/job.json" "$STEPS" "$prefetch" <<'PY'
import json, sys
src, dst, steps, prefetch = sys.argv[1:]
c = json.load(open(src))
c["training"].update(steps=int(steps), prefetch=(prefetch == "true"), log_every=1000)
json.dump(c, open(dst, "w"), indent=1)
PY
    run_job_on_hosts "$RUN" "$OUT/keys" 1
    code=$?
    if [ $code != 0 ]; then
      echo "delay_bench: the job (delay $d ms, prefetch $prefetch) failed (exit $code); see $RUN" >&2
      kill "$hop_pid" 2>/dev/null
      exit 1
    fi
    python3 - "$RUN" "$d" "$prefetch" <<'PY' | tee -a "$LAST" "$OUT/results.jsonl"
import json, statistics, sys, datetime
run, d, prefetch = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "true"
rows = [json.loads(l) for r in (0, 1) for l in open("%s/trainer%d.jsonl" % (run, r))]
steady = [r for r in rows if r["step"] >= 20]
step_ms = statistics.median(r["step_ms"] for r in steady)
print(json.dumps({"date": datetime.date.today().isoformat(), "delay_ms_each_way": d, "prefetch": prefetch,
                  "examples_per_s": round(2 * 512 * 1000 / step_ms), "step_ms": round(step_ms, 1),
                  "lookup_ms": round(statistics.median(r["lookup_ms"] for r in steady), 1)}))
PY
  done
  kill "$hop_pid" 2>/dev/null
  wait "$hop_pid" 2>/dev/null
done
python3 - "$OUT/results.jsonl" <<'PY'
import json, sys
rs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rs[(r["delay_ms_each_way"], r["prefetch"])] = r
print("%14s %12s %12s %8s" % ("delay each way", "no prefetch", "prefetch", "ratio"))
for d in sorted({k[0] for k in rs}):
    a, b = rs.get((d, False)), rs.get((d, True))
    if a and b:
        print("%11.1f ms %12d %12d %8.2f" % (d, a["examples_per_s"], b["examples_per_s"],
                                              b["examples_per_s"] / a["examples_per_s"]))
PY

# The picture (Debian's python3-matplotlib; said when missing): examples/s
# and the lookup wait against the delay, a line with prefetch and one without.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/delay.png" --x "delay_ms_each_way=delay added each way (ms)" \
    --by prefetch --series "examples_per_s=examples/s" --panel "lookup wait (ms, median step)" \
    --series "lookup_ms=lookup wait" --title "W1 through a delaying hop: what prefetch buys ($STEPS steps)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
