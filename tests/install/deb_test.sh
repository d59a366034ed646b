#!/usr/bin/env bash
# Tests the .deb (cmake/TesseraInstall.cmake) on this machine:
#   a) target tessera_deb packs tessera_VERSION_ARCH.deb in $TESSERA_BUILD_DIR;
#   b) dpkg -i installs it (its Depends already met here);
#   c) /usr/bin/tessera-quickstart, with no build tree in its environment,
#      runs the quickstart job (configs/criteo_dlrm.json on synthetic data,
#      2 servers, 2 trainers; a few seconds) to the master's "finished";
#   d) tests/install/consumer builds against /usr with find_package(Tessera);
#   e) dpkg -r tessera removes it again, leaving no file of it.
#
#   tests/install/deb_test.sh
#
# Needs root, dpkg and cpack: skipped (77) without them, and when a tessera
# package is installed already (this test would replace and then remove it).
# Takes about 15 s once the programs are built (packing most of it). Prints
# PASS/FAIL lines, exits non-zero on a failure. Removes the package and its
# temp dir (KEEP_TMP=1 keeps it) and ends what it started, whatever happens.
set -uo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: dpkg -i needs root"
  exit 77
fi
for tool in dpkg dpkg-deb cpack cmake c++ timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: no $tool"
    exit 77
  fi
done
if dpkg-query -W -f='${Status}' tessera 2>/dev/null | grep -q "install ok installed"; then
  echo "SKIP: a tessera package is installed already (dpkg -r tessera first)"
  exit 77
fi
# shellcheck source=SCRIPTDIR/install_common.sh
source "$(dirname "$0")/install_common.sh"
BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
INSTALLED=0
# shellcheck disable=SC2317  # run by cleanup
remove_package() { if [ "$INSTALLED" = 1 ]; then dpkg -r tessera >/dev/null 2>&1; fi; }
# shellcheck disable=SC2034  # read by install_common.sh's cleanup
EXTRA_CLEANUP=remove_package

# ---- a) pack ----
start=$SECONDS
rm -f "$BUILD_DIR"/tessera_*.deb
if ! timeout 600 cmake --build "$BUILD_DIR" --target tessera_deb >"$TMP/pack.out" 2>&1; then
  fail "a: target tessera_deb failed"
  show "$TMP/pack.out"
  exit 1
fi
DEB="$(find "$BUILD_DIR" -maxdepth 1 -name 'tessera_*.deb' | head -n 1)"
if [ -z "$DEB" ]; then
  fail "a: no tessera_*.deb in $BUILD_DIR"
  show "$TMP/pack.out"
  exit 1
fi
pass "a: packed $(basename "$DEB") ($(du -h "$DEB" | cut -f1)) in $((SECONDS - start)) s;" \
  "Depends: $(dpkg-deb -f "$DEB" Depends)"

# ---- b) install ----
INSTALLED=1  # a half-installed package is removed too
if timeout 120 dpkg -i "$DEB" >"$TMP/dpkg_i.out" 2>&1; then
  pass "b: dpkg -i installed tessera $(dpkg-query -W -f='${Version}' tessera)"
else
  fail "b: dpkg -i failed (are the Depends above installed?)"
  show "$TMP/dpkg_i.out"
  exit 1
fi

# ---- c) the quickstart from /usr ----
quickstart_part c criteo-dlrm /usr/bin/tessera-quickstart

# ---- d) a project built against /usr ----
if build_consumer /usr/lib/cmake/Tessera; then
  pass "d: find_package(Tessera CONFIG) from /usr; the program built against it says: $(head -n 1 "$TMP/consumer.out")"
else
  fail "d: the consumer project did not configure, build or run against /usr"
fi

# ---- e) remove ----
if dpkg -r tessera >"$TMP/dpkg_r.out" 2>&1 && [ ! -e /usr/bin/tessera_master ] && [ ! -e /usr/share/tessera ] &&
  [ ! -e /usr/lib/cmake/Tessera ] && [ ! -e /usr/include/tessera ]; then
  INSTALLED=0
  pass "e: dpkg -r tessera removed it"
else
  fail "e: dpkg -r tessera left files behind or failed"
  show "$TMP/dpkg_r.out"
fi

finish deb_test
