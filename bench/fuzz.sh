#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz) for a number of executions from its
# seeds, under AddressSanitizer (leak detection on) + UBSan, two targets at a
# time, and prints a table: executions, executions/s, coverage at the end
# (libFuzzer's cov: edges and ft: features), crashes/leaks found and the
# corpus grown. Each target's corpus, log and any crashing input stay in
# build-fuzz/fuzz-bench/<target>/.
#
#   bench/fuzz.sh [--runs N] [--max_seconds S] [--targets "fuzz_a fuzz_b"] [--jobs J] [--no_build]
#
# --runs: executions per target (default 10,000,000); --max_seconds: stop a
# target earlier than that (default: no limit; the JSON targets run at a
# few thousand per second under the sanitizers, ~1 h each for 10 million on
# a 2-core machine). Exits non-zero when any target found something.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS=10000000
MAX_SECONDS=0
TARGETS=""
JOBS="${TESSERA_JOBS:-2}"
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --max_seconds) MAX_SECONDS="$2"; shift 2 ;;
    --targets) TARGETS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --no_build) BUILD=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

BUILD_DIR="$ROOT/build-fuzz"
[ "$BUILD" = 1 ] && "$ROOT/scripts/build.sh" --fuzz --target tessera_fuzz >/dev/null
[ -z "$TARGETS" ] && TARGETS="$(cd "$BUILD_DIR" && ctest -N -L fuzz | awk '/Test +#/ {print $3}')"
OUT="$BUILD_DIR/fuzz-bench"

# One target: a fresh corpus seeded from the tree's, fuzzed in place.
run_one() {
  local t="$1" dir="$OUT/$1" flags=()
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$ROOT/tests/fuzz/corpus/$t/"* "$dir/corpus/"
  # What CTest gives the target too (the JSON ones: a dictionary).
  read -r -a flags <"$BUILD_DIR/tests/fuzz/$t.flags" || true
  local start=$SECONDS
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$BUILD_DIR/tests/fuzz/$t" -runs="$RUNS" -max_total_time="$MAX_SECONDS" -detect_leaks=1 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${flags[@]}" "$dir/corpus" \
    >"$dir/log" 2>&1 || true
  echo $((SECONDS - start)) >"$dir/seconds"
}

export -f run_one
export ROOT BUILD_DIR OUT RUNS MAX_SECONDS
limit=""
[ "$MAX_SECONDS" -gt 0 ] && limit=", at most $MAX_SECONDS s each"
echo "fuzzing $(echo "$TARGETS" | wc -w) targets, $RUNS runs each$limit, $JOBS at a time; logs in $OUT" >&2
# shellcheck disable=SC2086
printf '%s\n' $TARGETS | xargs -P "$JOBS" -I{} bash -c 'run_one {}'

found=0
echo "| target | executions | exec/s | cov | ft | crashes/leaks | corpus (files) | seconds |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in $TARGETS; do
  dir="$OUT/$t"
  execs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$dir/log")
  rate=$(awk '/stat::average_exec_per_sec/ {print $NF}' "$dir/log")
  # The last stats line: "#N  DONE  cov: C ft: F corp: ..."
  last=$(grep -E ' cov: [0-9]+ ft: [0-9]+' "$dir/log" | tail -1)
  cov=$(echo "$last" | sed -E 's/.* cov: ([0-9]+).*/\1/')
  ft=$(echo "$last" | sed -E 's/.* ft: ([0-9]+).*/\1/')
  bad=$(find "$dir/artifacts" -type f | wc -l)
  found=$((found + bad))
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$bad" \
    "$(find "$dir/corpus" -type f | wc -l)" "$(cat "$dir/seconds")"
done
if [ "$found" -gt 0 ]; then
  echo "found $found crashing or leaking input(s): $OUT/*/artifacts/ (the log next to each says what)" >&2
  exit 1
fi
