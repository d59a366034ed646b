#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through
# CTest; then runs the unit tests again in an AddressSanitizer +
# UndefinedBehaviorSanitizer build (memory errors in a server are data loss),
# three integration suites with every process of that build, and each fuzz
# target (tests/fuzz, clang + libFuzzer) for 10 s, all from one clang build
# in build-fuzz/.
# As root it also runs the cluster tests (tests/cluster: test hosts in
# network namespaces, a SLURM cluster on them), installing Debian's
# slurm-wlm and munge for them; otherwise CTest shows them skipped.
#   scripts/test.sh            everything
#   scripts/test.sh --no-asan  skip the sanitizer pass
#   scripts/test.sh --no-fuzz  skip the fuzz pass
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
JOBS="${TESSERA_JOBS:-2}"
ASAN=1
FUZZ=1
for arg in "$@"; do
  case "$arg" in
    --no-asan) ASAN=0 ;;
    --no-fuzz) FUZZ=0 ;;
    -h|--help) source "$ROOT/scripts/common.sh"; tessera_usage "$0"; exit 0 ;;
    *) echo "usage: scripts/test.sh [--no-asan] [--no-fuzz]" >&2; exit 2 ;;
  esac
done

"$ROOT/scripts/install_deps.sh"
# Debian packages that only some tests need, installed as root (a test whose
# package could not be installed says it is skipped).
#   install_for_tests "WHY" PACKAGE...
install_for_tests() {
  local why="$1"
  shift
  [ "$(id -u)" = 0 ] || return 0
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "== installing ${missing[*]} ($why)"
  install_them() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  install_them || { apt-get update -qq && install_them; } ||
    echo "could not install ${missing[*]}: the tests that need them will be skipped" >&2
}
install_for_tests "for the SLURM test, tests/cluster/slurm_test.sh" slurm-wlm munge
install_for_tests "for the stacks a failed integration test prints of the processes that still run" gdb
install_for_tests "for scripts/plot_run.py's test and the Python package's (python/tests)" \
  python3-matplotlib python3-torch python3-pytest python3-numpy python3-pip python3-setuptools

echo "== build (release)"
# Configured as scripts/build.sh configures it (the flags live in
# CMakeLists.txt; new folders for Ninja, as there), so that neither rebuilds
# what the other built.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
cmake -S "$ROOT" -B "$ROOT/build" -DTESSERA_WERROR=ON >/dev/null
# What the tests run: every test binary and the three roles (benchmarks are
# built by their own scripts), which keeps CI's two cores on what it checks.
# Tests labelled `script` are shell scripts, not build targets.
TEST_TARGETS=$(cd "$ROOT/build" && ctest -N -LE script | awk '/Test +#/ {print $3}')
PYTHON_TARGET=""
[ -d "$ROOT/build/python/CMakeFiles" ] && PYTHON_TARGET=tessera_python  # configured where pybind11 is found
# shellcheck disable=SC2086
cmake --build "$ROOT/build" -j"$JOBS" --target $TEST_TARGETS tessera_master tessera_ps tessera_trainer \
  tessera_compare_dumps tessera_install_targets $PYTHON_TARGET
# A second build of an unchanged tree, as the README's and the benchmarks'
# scripts/build.sh does it, must find nothing to do.
if "$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer |
  grep -E "Building (CXX|CUDA)"; then
  echo "FAIL: scripts/build.sh rebuilt the files above of a tree that did not change" >&2
  exit 1
fi
echo "== tests (release)"
(cd "$ROOT/build" && ctest --output-on-failure -j"$JOBS")

# The sanitizer pass: one clang build in build-fuzz/ (scripts/build.sh
# --fuzz: every library under ASan + UBSan, instrumented for libFuzzer's
# coverage) holds both the unit tests and the fuzz targets. clang compiles
# this twice as fast as gcc under the sanitizers, and the libraries are built
# once for both. Where clang or libFuzzer is missing, the unit tests run in a
# gcc ASan + UBSan build (build-asan/) and the fuzz pass says it is skipped.
probe="$(mktemp -d)"
HAVE_FUZZER=0
if echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer - -o "$probe/probe" 2>/dev/null; then
  HAVE_FUZZER=1
fi
rm -rf "$probe"
SAN_OPTS=(env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1)
# The unit tests of a sanitizer build.
san_unit_tests() {
  (cd "$1" && "${SAN_OPTS[@]}" ctest --output-on-failure -j"$JOBS" -L unit)
}
# Integration tests whose processes (master, servers, trainers) are the
# sanitizer build's: a server's memory error under real traffic, kill -9,
# SIGTERM and migrations. Each process writes its reports to a file of its
# own: a report fails the stage even where the test expected that process
# to fail.
SAN_INTEGRATION="integration_elastic_test integration_security_test integration_training_test"
SAN_BINARIES="tessera_master tessera_ps tessera_trainer"
san_integration_tests() {
  local reports rc=0
  reports="$(mktemp -d)"
  (cd "$1" && env ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$reports/asan" \
    UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan" \
    ctest --output-on-failure -j"$JOBS" -R "^($(echo $SAN_INTEGRATION | tr ' ' '|'))\$") || rc=$?
  if [ -n "$(ls -A "$reports")" ]; then
    cat "$reports"/*
    echo "the sanitizers reported the errors above in the integration tests' processes" >&2
    rc=1
  fi
  rm -rf "$reports"
  return "$rc"
}
if [ "$HAVE_FUZZER" = 1 ] && { [ "$ASAN" = 1 ] || [ "$FUZZ" = 1 ]; }; then
  echo "== build (clang, AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer: unit tests and fuzz targets)"
  # Configured as scripts/build.sh --fuzz configures it (bench/fuzz.sh's build).
  cmake -S "$ROOT" -B "$ROOT/build-fuzz" -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_WITH_CUDA=OFF \
    -DTESSERA_PYTHON=OFF -DTESSERA_WERROR=ON >/dev/null
  SAN_TARGETS=""
  if [ "$ASAN" = 1 ]; then
    SAN_TARGETS="$(cd "$ROOT/build-fuzz" && ctest -N -L unit | awk '/Test +#/ {print $3}') $SAN_BINARIES $SAN_INTEGRATION"
  fi
  if [ "$FUZZ" = 1 ]; then
    SAN_TARGETS="$SAN_TARGETS tessera_fuzz"
  fi
  # shellcheck disable=SC2086
  cmake --build "$ROOT/build-fuzz" -j"$JOBS" --target $SAN_TARGETS
  if [ "$ASAN" = 1 ]; then
    echo "== unit tests (sanitizers)"
    san_unit_tests "$ROOT/build-fuzz"
    echo "== integration tests, every process sanitized"
    san_integration_tests "$ROOT/build-fuzz"
  fi
  if [ "$FUZZ" = 1 ]; then
    echo "== fuzz targets (10 s each)"
    (cd "$ROOT/build-fuzz" && ctest --output-on-failure -j"$JOBS" -L fuzz)
  fi
else
  if [ "$ASAN" = 1 ]; then
    echo "== build (gcc, AddressSanitizer + UndefinedBehaviorSanitizer, unit tests)"
    cmake -S "$ROOT" -B "$ROOT/build-asan" -DTESSERA_SANITIZE=ON -DTESSERA_WITH_CUDA=OFF -DTESSERA_PYTHON=OFF \
      -DTESSERA_WERROR=ON >/dev/null
    UNIT_TARGETS=$(cd "$ROOT/build-asan" && ctest -N -L unit | awk '/Test +#/ {print $3}')
    # shellcheck disable=SC2086
    cmake --build "$ROOT/build-asan" -j"$JOBS" --target $UNIT_TARGETS $SAN_BINARIES $SAN_INTEGRATION
    echo "== unit tests (sanitizers)"
    san_unit_tests "$ROOT/build-asan"
    echo "== integration tests, every process sanitized"
    san_integration_tests "$ROOT/build-asan"
  fi
  # install_deps.sh installs clang and libFuzzer; where it could not, say so
  # rather than fail the suite on a missing compiler.
  if [ "$FUZZ" = 1 ]; then
    echo "== fuzz targets SKIPPED: clang++ with libFuzzer (-fsanitize=fuzzer) is not installed"
  fi
fi
echo "== all tests passed"
