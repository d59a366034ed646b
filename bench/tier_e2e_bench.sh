#!/usr/bin/env bash
# Tiered storage, end to end: the W1 job (1 master, 1 ps, 2 trainers; one
# table of 1,000,000 x 64, Zipf 1.05 ids, batch 512 bags of 20 ids) trained
# with all rows in memory, then with a host budget of a tenth of the table
# and RocksDB below it. Prints examples/s of each, the ratio, and the host
# tier's hit rate. Runs alternate (memory, tiered, memory, ...) so that noise
# on this shared machine hits both alike.
#
#   bench/tier_e2e_bench.sh [--steps N] [--repeats R] [--mode async|sync] [--prefetch] [--fraction F]
#       [--ps_flags "FLAGS"]
#
# --ps_flags: more flags for the tiered runs' server (e.g. "--write_back_bytes 0",
# the write-back without its buffer).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS=200
REPEATS=1
MODE=async
PREFETCH=0
FRACTION=0.1
EXTRA_PS_FLAGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --prefetch) PREFETCH=1; shift ;;
    --fraction) FRACTION="$2"; shift 2 ;;
    --ps_flags) EXTRA_PS_FLAGS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
LABEL="$MODE"
[ "$PREFETCH" = 1 ] && LABEL="$MODE+pf"
"$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer >/dev/null
OUT="$ROOT/run/bench/tier"
mkdir -p "$OUT"
LAST="$OUT/last_results.jsonl"  # this run's lines, for its plot
: >"$LAST"
CFG="$OUT/w1.json"
python3 - "$ROOT/bench/configs/w1.json" "$CFG" "$((STEPS + 20))" "$MODE" "$PREFETCH" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["training"]["steps"] = int(sys.argv[3]); c["training"]["consistency"] = sys.argv[4]; c["training"]["prefetch"] = sys.argv[5] == "1"
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
# Rows x dim x 4 bytes (SGD keeps no optimizer state).
TABLE_BYTES=$(python3 -c "import json;t=json.load(open('$CFG'))['tables'][0];print(t['num_embeddings']*t['embedding_dim']*4)")
HOST_BYTES=$(python3 -c "print(int($TABLE_BYTES * $FRACTION))")

run() {  # memory|tiered -> "examples/s hit_rate"
  local dir="$OUT/$1" flags=""
  rm -rf "$dir"
  [ "$1" = tiered ] && flags="--host_bytes $HOST_BYTES --rocksdb_path $dir/rocks{i} $EXTRA_PS_FLAGS"
  "$ROOT/scripts/launch_local.sh" --ps 1 --trainers 2 --config "$CFG" --run_dir "$dir" --ps_flags "$flags" >/dev/null
  python3 - "$dir/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
host = s.get("storage", {}).get("t0", {}).get("tiers", {}).get("host", {})
print(round(s["examples_per_s"]), "%.3f" % host.get("hit_rate", 1.0) if "hit_rate" in host else "-")
PY
}

echo "table $TABLE_BYTES bytes, host budget $HOST_BYTES bytes ($FRACTION), $STEPS timed steps, $MODE"
printf '%-8s %14s %14s %7s %9s\n' mode memory_ex/s tiered_ex/s ratio hit_rate
for _ in $(seq 1 "$REPEATS"); do
  read -r m _ <<<"$(run memory)"
  read -r t hit <<<"$(run tiered)"
  ratio=$(python3 -c "print('%.2f' % ($t / $m))")
  printf '%-8s %14s %14s %7s %9s\n' "$LABEL" "$m" "$t" "$ratio" "$hit"
  echo "{\"date\": \"$(date -I)\", \"mode\": \"$LABEL\", \"steps\": $STEPS, \"host_fraction\": $FRACTION, \"memory_examples_per_s\": $m, \"tiered_examples_per_s\": $t, \"ratio\": $ratio, \"host_hit_rate\": \"$hit\"}" | tee -a "$LAST" >>"$OUT/results.jsonl"
done

# The picture (Debian's python3-matplotlib; said when missing), drawn as
# bench/e2e_bench.sh draws its own: tiered beside all in memory, the ratio above.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/tier.png" --series "tiered_examples_per_s=tiered (host $FRACTION + RocksDB)" --series "memory_examples_per_s=all in memory" \
    --title "W1 examples/s, tiered vs all in memory ($LABEL)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
