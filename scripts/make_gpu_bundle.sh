#!/usr/bin/env bash
# Builds Tessera here (Release, CUDA on) and packs into bundle/ what
# tests/gpu/run_device_checks.sh needs on a GPU machine that can reach no
# package registry and has none of the dev packages (RocksDB, ZeroMQ, glog...):
#
#   bundle/bin/          the role binaries, tessera_compare_dumps, tessera_export, the GPU
#                        benchmark and the unit tests the device checks run
#                        (every CUDA test, the GPU tier's, the CPU kernels'),
#                        stripped
#   bundle/lib/          the shared libraries they load (ldd) that a CUDA base
#                        image lacks: ZeroMQ, RocksDB, glog, gflags, Gloo,
#                        OpenBLAS and their dependencies. Not glibc, libstdc++,
#                        libgcc_s, the CUDA driver or cuBLAS (hundreds of MiB;
#                        the machine's CUDA install or PyTorch's wheels bring
#                        it). The CUDA runtime is linked statically; NCCL is
#                        not linked (trainers open it when they need it).
#   bundle/lib/compat/   libstdc++ and libgcc_s, used by run_device_checks.sh
#                        only when the machine's are older than these
#   bundle/MANIFEST.txt  what is in it, sizes, the newest glibc symbol needed
#   bundle.tar.xz        all of the above, compressed: what travels to the GPU
#                        machine (run_device_checks.sh unpacks it)
#
#   scripts/make_gpu_bundle.sh [--build-dir DIR] [--out DIR] [--targets "T1 T2"] [--no-build] [-- cmake args]
#
# Then, on the device tool: carry ["bundle.tar.xz"], run tests/gpu/run_device_checks.sh.
# Ends by running a CPU unit test from the bundle in an empty environment
# (env -i, only bundle/lib on LD_LIBRARY_PATH) to prove the libraries resolve.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build-gpu-bundle"
DEST="$ROOT/bundle"
# What tests/gpu/run_device_checks.sh runs: the CUDA tests, the GPU tier's,
# the CPU kernels' (proof the bundle's libraries resolve), the roles (the
# device job), the dump comparer and the GPU benchmark.
BUNDLED=(kernels_device_cuda_test kernels_embedding_bag_cuda_test kernels_dedup_cuda_test
  kernels_sparse_optimizer_cuda_test kernels_dense_ops_cuda_test trainer_dlrm_model_cuda_test
  trainer_dense_optimizer_cuda_test trainer_collective_nccl_test ps_gpu_tier_test kernels_embedding_bag_test kernels_dedup_test
  kernels_sparse_optimizer_test kernels_device_choice_test
  tessera_master tessera_ps tessera_trainer tessera_compare_dumps tessera_export tessera_gpu_bench)
TARGETS=("${BUNDLED[@]}")
BUILD_IT=1
CMAKE_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD="$2"; shift 2 ;;
    --out) DEST="$2"; shift 2 ;;
    --targets) read -r -a TARGETS <<<"$2"; shift 2 ;;
    --no-build) BUILD_IT=0; shift ;;
    --) shift; CMAKE_ARGS=("$@"); break ;;
    -h|--help) source "$(dirname "$0")/common.sh"; tessera_usage "$0"; exit 0 ;;
    *) echo "make_gpu_bundle: unknown argument $1 (--help says what it takes)" >&2; exit 2 ;;
  esac
done

if [ "$BUILD_IT" = 1 ]; then
  # Warnings are CI's gate (RelWithDebInfo, -O2); at -O3 GCC 12 raises false
  # -Wrestrict alarms inside std::string, which must not stop a bundle.
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON -DTESSERA_WERROR=OFF \
    "${CMAKE_ARGS[@]}" >/dev/null
  cmake --build "$BUILD" -j"${TESSERA_JOBS:-2}" --target "${TARGETS[@]}"
fi

# Integration tests find the role binaries by their build path, so they run
# only in a build tree; the device checks run the roles through
# scripts/launch_local.sh instead.
NAMES="${BUNDLED[*]}"
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib/compat"
for name in $NAMES; do
  path=$(find "$BUILD" -type f -perm -u+x -name "$name" -not -path '*/CMakeFiles/*' | head -1)
  if [ -z "$path" ]; then
    echo "make_gpu_bundle: $name was not built" >&2
    continue
  fi
  cp "$path" "$DEST/bin/"
  strip --strip-unneeded "$DEST/bin/$name"
done

# Libraries from a base image, not shipped (sonames' stems).
is_base_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
      libutil.so* | libnsl.so* | libanl.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libnvidia-*.so* | \
      libcudart.so* | libcublas.so* | libcublasLt.so*) return 0 ;;
  esac
  return 1
}
for bin in "$DEST"/bin/*; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  is_base_lib "$soname" && continue
  [ -e "$DEST/lib/$soname" ] || cp -L "$path" "$DEST/lib/$soname"
done
strip --strip-unneeded "$DEST"/lib/*.so* 2>/dev/null || true
any_bin=$(find "$DEST/bin" -type f | head -1)
for lib in libstdc++.so.6 libgcc_s.so.1; do
  path=$(ldd "$any_bin" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] && cp -L "$path" "$DEST/lib/compat/$lib"
done

# The newest glibc version any shipped file needs: the machine's must be >= it.
GLIBC_NEEDED=$(objdump -T "$DEST"/bin/* "$DEST"/lib/*.so* 2>/dev/null | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1)
{
  echo "Tessera GPU bundle, built $(date -u +%FT%TZ) on $(grep -m1 PRETTY_NAME /etc/os-release | cut -d= -f2)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) ($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) files changed)"
  echo "needs: $GLIBC_NEEDED or newer, libstdc++ (or lib/compat), a CUDA driver, libcublas.so.13"
  echo
  (cd "$DEST" && du -b bin/* lib/*.so* lib/compat/* | sort -k2)
  echo
  du -sh "$DEST" | cut -f1 | sed 's/^/total: /'
} >"$DEST/MANIFEST.txt"

# Prove the bundle resolves on its own: with only bundle/lib added, every
# library a binary loads is a base-image one or comes from bundle/lib (cuBLAS
# aside: the GPU machine brings it); then a CPU test runs in an empty
# environment.
stray=$(for bin in "$DEST"/bin/*; do
  env -i LD_LIBRARY_PATH="$DEST/lib" ldd "$bin" | awk '$2 == "=>" {print $1, $3}'
done | sort -u | while read -r soname path; do
  is_base_lib "$soname" && continue
  case "$path" in "$DEST/lib/"*) ;; *) echo "$soname=$path" ;; esac
done)
if [ -n "$stray" ]; then
  echo "make_gpu_bundle: not resolved from $DEST/lib: $stray" >&2
  exit 1
fi
probe=""
for t in kernels_dedup_test kernels_embedding_bag_test common_status_test; do
  [ -e "$DEST/bin/$t" ] && probe="$t" && break
done
if [ -n "$probe" ]; then
  env -i LD_LIBRARY_PATH="$DEST/lib" "$DEST/bin/$probe" --gtest_brief=1 >/dev/null
  echo "make_gpu_bundle: $probe passed from the bundle in an empty environment"
fi
cat "$DEST/MANIFEST.txt"
# One compressed file is what travels (the device tool carries at most 64 MiB).
tar -C "$(dirname "$DEST")" -cf - "$(basename "$DEST")" | xz -T0 -6 >"$DEST.tar.xz"
echo "make_gpu_bundle: $DEST.tar.xz $(du -h "$DEST.tar.xz" | cut -f1)"
