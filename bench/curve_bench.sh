#!/usr/bin/env bash
# What CURVE costs: W1 and W2 (bench/e2e_bench.sh's workloads) with the job's
# keys (every socket encrypted and authenticated) and with --insecure (plain
# TCP), one after the other, alternating, R times each; prints the median
# examples/s of each and the ratio CURVE / plain (goal: >= 0.90).
#
#   bench/curve_bench.sh [--steps N] [--mode async|sync] [--workloads "w1 w2"] [--repeats R] [--qcomms "fp32 bf16"]
#
# --qcomms lists the training.qcomms precisions to run (both ways: the
# lookups' rows and the gradients on the wire; bf16 halves the bytes CURVE
# encrypts for them), fp32 alone by default. Several are interleaved too,
# round by round, and reported each on its own line (bf16 as workload w2+bf16).
#
# Alternating the two settings run by run spreads this shared machine's noise
# over both; the ratio of medians is the figure to read.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS=300
MODE=async
WORKLOADS="w1 w2"
REPEATS=3
QCOMMS=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --qcomms) QCOMMS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
"$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer >/dev/null
OUT="$ROOT/run/curve_bench"
mkdir -p "$OUT"
LAST="$OUT/last_results.jsonl"  # this run's lines, for its plot
: >"$LAST"

run() {  # workload security qcomms -> examples/s
  local w="$1" security="$2" q="$3" ps=1 cfg="$OUT/$1_$3.json" flags=()
  [ "$w" = w2 ] && ps=2
  [ "$security" = plain ] && flags=(--insecure)
  python3 - "$ROOT/bench/configs/$w.json" "$cfg" "$((STEPS + 20))" "$MODE" "$q" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["training"]["steps"] = int(sys.argv[3]); c["training"]["consistency"] = sys.argv[4]
c["training"]["qcomms"] = {"forward_precision": sys.argv[5], "backward_precision": sys.argv[5]}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  "$ROOT/scripts/launch_local.sh" --ps "$ps" --trainers 2 --config "$cfg" --run_dir "$OUT/run_${w}_${security}_$q" \
    "${flags[@]}" >/dev/null 2>&1
  python3 -c "import json;print(round(json.load(open('$OUT/run_${w}_${security}_$q/summary.json'))['examples_per_s']))"
}

median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

printf '%-8s %-6s %10s %10s %7s   %s\n' load mode curve plain ratio "runs (curve | plain)"
for w in $WORKLOADS; do
  declare -A curve=() plain=()
  for _ in $(seq 1 "$REPEATS"); do
    for q in $QCOMMS; do
      curve[$q]+="$(run "$w" curve "$q") "
      plain[$q]+="$(run "$w" plain "$q") "
    done
  done
  for q in $QCOMMS; do
    label=$w
    [ "$q" = fp32 ] || label="$w+$q"
    c=$(echo ${curve[$q]} | median)
    p=$(echo ${plain[$q]} | median)
    ratio=$(python3 -c "print('%.3f' % ($c / $p))")
    printf '%-8s %-6s %10s %10s %7s   %s| %s\n' "$label" "$MODE" "$c" "$p" "$ratio" "${curve[$q]}" "${plain[$q]}"
    curve_list=$(echo ${curve[$q]} | tr ' ' ',')
    plain_list=$(echo ${plain[$q]} | tr ' ' ',')
    echo "{\"date\": \"$(date -I)\", \"workload\": \"$label\", \"mode\": \"$MODE\", \"qcomms\": \"$q\", \"steps\": $STEPS, \"curve\": [$curve_list], \"plain\": [$plain_list], \"ratio\": $ratio}" | tee -a "$LAST" >>"$OUT/results.jsonl"
  done
  unset curve plain
done

# The picture (Debian's python3-matplotlib; said when missing), drawn as
# bench/e2e_bench.sh draws its own: CURVE beside plain TCP, the ratio above.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/curve.png" --series "curve=CURVE (keys)" --series "plain=plain TCP (--insecure)" \
    --title "examples/s with CURVE and without ($MODE, median of $REPEATS)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
