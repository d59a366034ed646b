#!/usr/bin/env bash
# Configures and builds Tessera into build/ (or $TESSERA_BUILD_DIR).
#   scripts/build.sh                 release build (RelWithDebInfo), with the Python extension (python/)
#   scripts/build.sh --asan          AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh --fuzz          clang build of the fuzz targets in build-fuzz/ (add --target tessera_fuzz)
#   scripts/build.sh --target X      only target X
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
JOBS="${TESSERA_JOBS:-2}"
EXTRA=()
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) BUILD_DIR="$ROOT/build-asan"; EXTRA+=(-DTESSERA_SANITIZE=ON -DTESSERA_WITH_CUDA=OFF -DTESSERA_PYTHON=OFF); shift ;;
    --fuzz)
      BUILD_DIR="$ROOT/build-fuzz"
      EXTRA+=(-DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_WITH_CUDA=OFF -DTESSERA_PYTHON=OFF)
      shift ;;
    --target) TARGETS+=(--target "$2"); shift 2 ;;
    -h|--help) source "$ROOT/scripts/common.sh"; tessera_usage "$0"; exit 0 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
"$ROOT/scripts/install_deps.sh"
# A new build folder is configured for Ninja: with Makefiles CMake compiles a
# target's files only once the libraries it links are built, which left one
# of two cores idle for much of a build (scripts/test.sh's release targets:
# 804 s against Ninja's 501 s). A folder already configured keeps its
# generator: CMake reads CMAKE_GENERATOR only for a new one.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
cmake -S "$ROOT" -B "$BUILD_DIR" "${EXTRA[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" "${TARGETS[@]}"
