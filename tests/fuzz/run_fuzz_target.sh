#!/usr/bin/env bash
# Runs one libFuzzer target over its seed corpus, leaving the seeds as they
# are (new inputs go to a scratch folder, deleted after). Exits non-zero on
# a crash, leak, UB report, slow input (over 10 s) or out-of-memory, the
# input that did it kept in ARTIFACT_DIR.
#   run_fuzz_target.sh BINARY SEED_DIR ARTIFACT_DIR [libFuzzer flags...]
set -euo pipefail
bin="$1" seeds="$2" artifacts="$3"
shift 3
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
"$bin" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$(basename "$bin")-" "$@" "$scratch" "$seeds"
