#!/usr/bin/env bash
# scripts/flamegraph.py on a small perf script text written here: the folded
# stacks it writes (exact counts, C++ names shortened, unknown frames named by
# their library, --comm), a PNG, and a clear error (the line) for damaged
# input. Skipped (exit 77) where Debian's python3-matplotlib is not installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=SCRIPTDIR/../script_checks.sh
source "$ROOT/tests/script_checks.sh"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "SKIPPED: python3-matplotlib is not installed"
  exit 77
fi
FAILURES=0
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
sample() {  # comm tid frames... (leaf first, as perf prints them)
  local comm="$1" tid="$2"
  shift 2
  printf '%s 1234/%s [001] 100.%06d:     1001 cpu-clock:\n' "$comm" "$tid" "$RANDOM"
  local f
  for f in "$@"; do printf '\t    55d0 %s (/usr/bin/tessera_ps)\n' "$f"; done
  printf '\n'
}
{
  echo "# perf script's own comment"
  for _ in 1 2 3; do
    sample tessera_ps 1235 "tessera::RowStore::Update(std::span<long const, 18446744073709551615ul>)+0x10" \
      "tessera::PsService::HandlePush()+0x20" "main+0x5"
  done
  sample tessera_ps 1236 "tessera::PsService::HandlePush()+0x20" "main+0x5"
  printf 'rocksdb:low 1234/1240 100.000003: cpu-clock:\n\t    7000 [unknown] (/usr/lib/librocksdb.so.7.8)\n\n'
} >"$dir/perf.txt"

"$ROOT/scripts/flamegraph.py" "$dir/perf.txt" --out "$dir/flame.png" --folded "$dir/flame.folded" --title test
expected="rocksdb:low;[librocksdb.so.7.8] 1
tessera_ps;main;tessera::PsService::HandlePush() 1
tessera_ps;main;tessera::PsService::HandlePush();tessera::RowStore::Update() 3"
if [ "$(cat "$dir/flame.folded")" = "$expected" ]; then
  pass "folded stacks: counts per stack, root first, names without arguments or offsets"
else
  fail "folded stacks differ:"
  cat "$dir/flame.folded"
fi
if [ "$(head -c 4 "$dir/flame.png" | tail -c 3)" = "PNG" ]; then
  pass "a PNG is written"
else
  fail "no PNG at $dir/flame.png"
fi

"$ROOT/scripts/flamegraph.py" "$dir/perf.txt" --out "$dir/ps.png" --folded "$dir/ps.folded" --comm tessera_ps >/dev/null
if ! grep -q rocksdb "$dir/ps.folded" && [ "$(wc -l <"$dir/ps.folded")" = 2 ]; then
  pass "--comm keeps only the named threads"
else
  fail "--comm tessera_ps kept: $(cat "$dir/ps.folded")"
fi

printf 'tessera_ps 1234/1235 [001] 100.000001: cpu-clock:\n\tnot a frame\n' >"$dir/bad.txt"
if out=$("$ROOT/scripts/flamegraph.py" "$dir/bad.txt" --out "$dir/bad.png" 2>&1); then
  fail "damaged input was drawn"
elif echo "$out" | grep -q "line 2: not a stack frame"; then
  pass "damaged input: an error naming its line"
else
  fail "damaged input: unclear error: $out"
fi
[ "$FAILURES" = 0 ] || { echo "$FAILURES check(s) failed" >&2; exit 1; }
