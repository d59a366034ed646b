#!/usr/bin/env bash
# Tests the installed tree (cmake/TesseraInstall.cmake):
#   a) cmake --install of $TESSERA_BUILD_DIR into a fresh prefix puts the
#      programs, scripts, configs, headers, libraries and CMake package there;
#   b) a project of its own (tests/install/consumer) finds it with
#      find_package(Tessera CONFIG), builds against it and runs;
#   c) bin/tessera-quickstart from the prefix, with no build tree in its
#      environment, runs tiny_job.json (2 servers, 2 trainers, synthetic data)
#      to the master's "finished".
#
#   tests/install/install_test.sh
#
# Needs the build's target tessera_install_targets built (scripts/test.sh
# builds it). Takes about 10 s; every step is bounded. Prints PASS/FAIL lines,
# exits non-zero on a failure, 77 (skipped) without cmake or a C++ compiler.
# Removes its temp dir (KEEP_TMP=1 keeps it) and ends what it started.
set -uo pipefail

for tool in cmake c++ timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: no $tool"
    exit 77
  fi
done
# shellcheck source=SCRIPTDIR/install_common.sh
source "$(dirname "$0")/install_common.sh"
BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
PREFIX="$TMP/prefix"

# ---- a) the install ----
if ! timeout 60 cmake --install "$BUILD_DIR" --prefix "$PREFIX" >"$TMP/install.out" 2>&1; then
  fail "a: cmake --install $BUILD_DIR failed (is target tessera_install_targets built?)"
  show "$TMP/install.out"
  exit 1
fi
missing=()
for f in bin/tessera_master bin/tessera_ps bin/tessera_trainer bin/tessera_compare_dumps bin/tessera-quickstart \
  share/tessera/scripts/launch_local.sh share/tessera/scripts/common.sh share/tessera/scripts/quickstart.sh \
  share/tessera/scripts/run_master.sh share/tessera/scripts/make_job_keys.sh share/tessera/scripts/plot_run.py \
  share/tessera/scripts/slurm/tessera.sbatch share/tessera/configs/criteo_dlrm.json \
  include/tessera/common/status.h include/tessera/master/planner.h lib/libtessera_common.a \
  lib/cmake/Tessera/TesseraConfig.cmake lib/cmake/Tessera/TesseraConfigVersion.cmake; do
  [ -e "$PREFIX/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ]; then
  pass "a: cmake --install put programs, scripts, configs, headers, libraries and the CMake package in the prefix"
else
  fail "a: missing from the prefix: ${missing[*]}"
fi

# ---- b) a project built against the prefix ----
if build_consumer "$PREFIX/lib/cmake/Tessera" -DCMAKE_PREFIX_PATH="$PREFIX"; then
  pass "b: find_package(Tessera CONFIG) from the prefix; the program built against it says: $(head -n 1 "$TMP/consumer.out")"
else
  fail "b: the consumer project did not configure, build or run against the prefix"
fi

# ---- c) the installed quickstart, with no build tree ----
quickstart_part c install_test_job "$PREFIX/bin/tessera-quickstart" --config "$TINY_JOB"

finish install_test
