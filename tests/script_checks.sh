# Shared by the script tests (tests/integration/launch_local_test.sh,
# tests/install/*.sh): a PASS or FAIL line per check, FAIL counted in
# FAILURES (which the test sets to 0 first), and the tails of logs after a
# failure.
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
show() {  # FILE...: the tails of logs, after a failure
  local f
  for f in "$@"; do
    echo "---- tail of $f"
    tail -n 25 "$f" 2>/dev/null | sed 's/^/    /'
  done
}
