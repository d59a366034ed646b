#!/usr/bin/env bash
# CTest's python_tests: the package's pytest suite against a build tree,
# then `pip install ./python` (into a scratch folder, reusing the build
# tree) and an import of what it installed.
#   python/tests/run_pytest.sh BUILD_DIR PYTHON
# Exits 77 (skipped) where PYTHON lacks torch, pytest or pip, and says so.
# TESSERA_TORCHREC_PYTHON=INTERPRETER adds a pass of test_torchrec_interop.py
# with that interpreter (a virtual environment with torchrec, numpy and
# pytest, of PYTHON's CPython version: ../shared/peers/README.md); PYTHON
# skips that file where it has no torchrec.
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
  timeout 600 "$PY" -m pytest -q -rs -p no:cacheprovider "$HERE"

if [ -n "${TESSERA_TORCHREC_PYTHON:-}" ]; then
  TR="$TESSERA_TORCHREC_PYTHON"
  echo "== test_torchrec_interop.py with $TR"
  # The extension in $BUILD/python is built for PYTHON's CPython version.
  want="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  got="$("$TR" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || {
    echo "FAIL: TESSERA_TORCHREC_PYTHON=$TR does not run" >&2; exit 1; }
  if [ "$got" != "$want" ]; then
    echo "FAIL: TESSERA_TORCHREC_PYTHON=$TR is CPython $got; the extension in $BUILD/python is built for $want" >&2
    exit 1
  fi
  for m in torch torchrec numpy pytest; do
    if ! "$TR" -c "import $m" 2>/dev/null; then
      echo "FAIL: TESSERA_TORCHREC_PYTHON=$TR cannot import $m (../shared/peers/README.md makes its environment)" >&2
      exit 1
    fi
  done
  PYTHONPATH="$BUILD/python" TESSERA_BUILD_DIR="$BUILD" \
    timeout 600 "$TR" -m pytest -q -p no:cacheprovider "$HERE/test_torchrec_interop.py"
else
  echo "== test_torchrec_interop.py with torchrec: skipped (set TESSERA_TORCHREC_PYTHON to an interpreter with torchrec to run it)"
fi

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
