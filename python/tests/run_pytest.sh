#!/usr/bin/env bash
# CTest's python_tests: the package's pytest suite against a build tree,
# then `pip install ./python` (into a scratch folder, reusing the build
# tree) and an import of what it installed.
#   python/tests/run_pytest.sh BUILD_DIR PYTHON
# Exits 77 (skipped) where PYTHON lacks torch, pytest or pip, and says so.
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
PY="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
for m in torch pytest numpy pip setuptools; do
  if ! "$PY" -c "import $m" 2>/dev/null; then
    echo "SKIPPED: $PY cannot import $m (Debian: apt-get install python3-torch python3-pytest python3-pip)"
    exit 77
  fi
done
PYTHONPATH="$BUILD/python" TESSERA_BUILD_DIR="$BUILD" \
  timeout 600 "$PY" -m pytest -q -p no:cacheprovider "$HERE"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "== pip install ./python (reusing $BUILD)"
# (Its setuptools leaves python/build/ and python/tessera.egg-info/, which git ignores.)
if ! TESSERA_CMAKE_BUILD_DIR="$BUILD" timeout 600 "$PY" -m pip install -q --no-build-isolation --no-deps \
  --root-user-action=ignore --target "$scratch/site" "$HERE/.." >"$scratch/pip.log" 2>&1; then
  cat "$scratch/pip.log"
  echo "FAIL: pip install ./python" >&2
  exit 1
fi
(cd "$scratch" && PYTHONPATH="$scratch/site" "$PY" -c "
import tessera, tessera.torch
assert tessera._tessera.__file__.startswith('$scratch/site'), tessera._tessera.__file__
print('pip-installed tessera imports from', tessera.__file__)")
