#!/usr/bin/env bash
# Every script a user runs by hand answers --help (and -h) with its opening
# comment, exits 0 and does nothing else: no build, no package installed, no
# key folder named "--help" (make_job_keys.sh once wrote one). An unknown
# option exits 2 and says so. Prints PASS/FAIL lines; exits non-zero on a
# failure.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# What a script must not run for --help: each records that it was run.
mkdir "$dir/bin"
for tool in cmake apt-get ninja make; do
  # shellcheck disable=SC2016  # $0 and $* are the stub's, not this script's
  printf '#!/bin/sh\necho "$0 $*" >>"%s/ran"\n' "$dir" >"$dir/bin/$tool"
  chmod +x "$dir/bin/$tool"
done
FAILURES=0
check() {  # NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; FAILURES=$((FAILURES + 1)); fi
}
for script in launch_local.sh make_job_keys.sh quickstart.sh test.sh build.sh make_gpu_bundle.sh; do
  first="$(awk 'NR == 2 { sub(/^# ?/, ""); print; exit }' "$ROOT/scripts/$script")"
  for flag in --help -h; do
    out="$(cd "$dir" && PATH="$dir/bin:$PATH" bash "$ROOT/scripts/$script" "$flag" 2>&1)"
    rc=$?
    check "$script $flag exits 0" [ "$rc" -eq 0 ]
    check "$script $flag prints its usage" grep -qF -- "$first" <<<"$out"
  done
  check "$script --help ran nothing" [ ! -e "$dir/ran" ]
  check "$script --help wrote nothing" [ "$(find "$dir" -mindepth 1 -maxdepth 1 ! -name bin | wc -l)" -eq 0 ]
  rm -f "$dir/ran"
done
for script in launch_local.sh make_job_keys.sh make_gpu_bundle.sh; do
  out="$(cd "$dir" && PATH="$dir/bin:$PATH" bash "$ROOT/scripts/$script" --no_such_option 2>&1)"
  rc=$?
  check "$script refuses an unknown option (exit 2)" [ "$rc" -eq 2 ]
  check "$script names the unknown option" grep -qF -- "--no_such_option" <<<"$out"
done
check "make_job_keys.sh made no folder for the option" [ ! -e "$dir/--no_such_option" ]
[ "$FAILURES" -eq 0 ] || { echo "$FAILURES failure(s)"; exit 1; }
