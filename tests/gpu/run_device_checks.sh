#!/usr/bin/env bash
# Everything that needs a GPU, as one command for a machine that has one
# (CI has none: there these tests skip, visibly). Finishes in a few minutes.
#
#   tests/gpu/run_device_checks.sh
#
# 1. binaries: from bundle/ (scripts/make_gpu_bundle.sh; for a machine with no
#    package registry and no RocksDB/ZeroMQ/glog dev packages), else a build
#    into build-gpu/ if this machine can configure one
# 2. every CUDA test binary, and the CPU kernel tests (they prove the bundle's
#    libraries resolve); the "[ bitwise ]" lines record how many elements
#    matched the CPU bit for bit
# 3. tessera_gpu_bench and bench/gpu_bench_torch.py on the same batch
# 4. a 2-trainer, 2-server job on --device cuda:0 against the CPU job
#    (parameters within 1e-4): MISSING until the roles' GPU paths are built
# 5. a summary table, last
#
# Files go to $OUT (the device tool collects it; at most 8 come back), else
# to gpu-checks/: summary.txt, device_checks.log (all output), tests.log,
# gpu_bench.jsonl, torch_bench.jsonl, device_job.log.
# Exit status: 0 when every step that ran passed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/gpu-checks}"
mkdir -p "$OUT"
LOG="$OUT/device_checks.log"
: >"$LOG"
T0=$(date +%s)
ROWS=()
FAILED=0

log() { echo "$*" | tee -a "$LOG"; }
# row STEP RESULT DETAIL: one line of the summary table.
row() {
  ROWS+=("$(printf '%-34s %-8s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && FAILED=1
  log "== $1: $2 $3"
}

log "== device checks in $ROOT, output in $OUT, $(date -u +%FT%TZ)"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  (command -v nvcc >/dev/null && nvcc --version | tail -2) || echo "nvcc: not on PATH"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  ldd --version | head -1
} >>"$LOG" 2>&1

# ---- 1. binaries and their libraries
BIN="" LIBPATH=""
if [ -d "$ROOT/bundle/bin" ]; then
  BIN="$ROOT/bundle/bin"
  LIBPATH="$ROOT/bundle/lib"
  row "binaries" ok "from bundle/ ($(du -sh "$ROOT/bundle" | cut -f1))"
elif command -v cmake >/dev/null; then
  B="$ROOT/build-gpu"
  if timeout 120 cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON >>"$LOG" 2>&1 &&
    timeout 420 cmake --build "$B" -j"$(nproc)" --target kernels_device_cuda_test kernels_embedding_bag_cuda_test \
      kernels_dedup_cuda_test kernels_sparse_optimizer_cuda_test kernels_dense_ops_cuda_test \
      kernels_embedding_bag_test kernels_dedup_test kernels_sparse_optimizer_test tessera_gpu_bench >>"$LOG" 2>&1; then
    BIN="$B/bin-flat"
    mkdir -p "$BIN"
    find "$B" -type f -perm -u+x \( -name 'kernels_*test' -o -name 'tessera_*' \) -exec ln -sf {} "$BIN/" \;
    row "binaries" ok "built in build-gpu/"
  else
    row "binaries" FAIL "no bundle/ and the build failed (missing dev packages?), see device_checks.log"
  fi
else
  row "binaries" FAIL "no bundle/ and no cmake"
fi

# cuBLAS is not bundled (hundreds of MiB): the CUDA toolkit's, else the one
# PyTorch's wheels bring.
CUBLAS_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s) for p in nvidia.__path__ for s in ("cu13/lib", "cublas/lib")))' 2>/dev/null); do
  if ls "$d"/libcublas.so.13* >/dev/null 2>&1; then
    CUBLAS_DIR="$d"
    break
  fi
done
[ -z "$CUBLAS_DIR" ] && CUBLAS_DIR="$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)"
log "cuBLAS from: ${CUBLAS_DIR:-not found}"
LIBPATH="${LIBPATH:+$LIBPATH:}${CUBLAS_DIR}"
# The bundle's binaries were built against Debian 12's libstdc++ (GCC 12); an
# older system one is replaced by the copy in bundle/lib/compat.
if [ -n "$BIN" ] && [ -d "$ROOT/bundle/lib/compat" ] &&
  ! env LD_LIBRARY_PATH="$LIBPATH" "$BIN/kernels_device_cuda_test" --gtest_list_tests >/dev/null 2>&1; then
  LIBPATH="$LIBPATH:$ROOT/bundle/lib/compat"
  log "using bundle/lib/compat (system libstdc++ too old)"
fi
run_bin() { env LD_LIBRARY_PATH="$LIBPATH" "$@"; }

# ---- 2. tests
if [ -n "$BIN" ]; then
  : >"$OUT/tests.log"
  for t in "$BIN"/kernels_*cuda_test "$BIN"/kernels_embedding_bag_test "$BIN"/kernels_dedup_test \
    "$BIN"/kernels_sparse_optimizer_test; do
    [ -e "$t" ] || continue
    name="$(basename "$t")"
    timeout 300 env LD_LIBRARY_PATH="$LIBPATH" "$t" --gtest_color=no >"$OUT/$name.tmp" 2>&1
    rc=$?
    cat "$OUT/$name.tmp" >>"$OUT/tests.log"
    passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$OUT/$name.tmp" | tail -1)
    skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$OUT/$name.tmp" | tail -1)
    failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$OUT/$name.tmp" | tail -1)
    detail="passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0}"
    if [ $rc -eq 0 ] && [ "${skipped:-0}" -gt 0 ] && [[ $name == *cuda_test ]] && [ "$name" != kernels_device_cuda_test ]; then
      row "$name" FAIL "$detail: skipped on a GPU machine: $(grep -m1 'no CUDA device' "$OUT/$name.tmp")"
    elif [ $rc -eq 0 ]; then
      row "$name" ok "$detail"
    else
      row "$name" FAIL "$detail (exit $rc)"
    fi
    grep -h '^\[ bitwise  \]' "$OUT/$name.tmp" >>"$OUT/bitwise.tmp"
    rm -f "$OUT/$name.tmp"
  done
fi

# ---- 3. benchmarks
IDS=/tmp/tessera_gpu_bench_ids.bin
if [ -n "$BIN" ] && [ -e "$BIN/tessera_gpu_bench" ]; then
  if timeout 240 env LD_LIBRARY_PATH="$LIBPATH" "$BIN/tessera_gpu_bench" --ids_out "$IDS" >"$OUT/gpu_bench.jsonl" \
    2>>"$LOG"; then
    fwd=$(grep '"bench":"forward"' "$OUT/gpu_bench.jsonl" | grep -oP '"median_ms":\K[0-9.]+')
    frac=$(grep '"bench":"forward"' "$OUT/gpu_bench.jsonl" | grep -oP '"frac_of_copy":\K[0-9.]+')
    bwd=$(grep '"bench":"backward_rowwise_adagrad"' "$OUT/gpu_bench.jsonl" | grep -oP '"median_ms":\K[0-9.]+')
    if [ -n "$fwd" ] && [ -n "$bwd" ]; then
      row "tessera_gpu_bench" ok "forward $fwd ms ($frac of copy bw), backward+rowwise $bwd ms"
    else
      row "tessera_gpu_bench" FAIL "it printed no timings, see gpu_bench.jsonl / device_checks.log"
    fi
  else
    row "tessera_gpu_bench" FAIL "see gpu_bench.jsonl / device_checks.log"
  fi
  cat "$OUT/gpu_bench.jsonl" >>"$LOG"
else
  row "tessera_gpu_bench" SKIPPED "not built"
fi
TORCH_ARGS=()
[ -s "$IDS" ] && TORCH_ARGS=(--ids "$IDS")
if PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/bench/gpu_bench_torch.py" "${TORCH_ARGS[@]}" \
  >"$OUT/torch_bench.jsonl" 2>>"$LOG"; then
  fwd=$(grep '"torch_forward"' "$OUT/torch_bench.jsonl" | grep -oP '"median_ms": \K[0-9.]+')
  bwd=$(grep '"torch_backward_rowwise_adagrad"' "$OUT/torch_bench.jsonl" | grep -oP '"median_ms": \K[0-9.-]+')
  row "gpu_bench_torch.py" ok "forward ${fwd:-?} ms, backward+rowwise (torch ops) ${bwd:-?} ms"
else
  row "gpu_bench_torch.py" FAIL "see torch_bench.jsonl / device_checks.log"
fi
cat "$OUT/torch_bench.jsonl" >>"$LOG"

# ---- 4. The distributed job on the GPU against the CPU job: the same
# 2-trainer, 2-server job once on the CPU and once with --device cuda:0,
# parameters within 1e-4. The roles take --device, but their GPU paths (the
# server's GPU tier, the trainer's cuBLAS + NCCL) are not built: they refuse
# cuda:N at start. This step records that refusal as MISSING, not as a pass.
device_job_check() {
  local b
  for b in tessera_master tessera_ps tessera_trainer; do
    if [ ! -e "$BIN/$b" ]; then
      row "device job cuda:0 vs cpu" SKIPPED "$b not in the bundle/build"
      return
    fi
  done
  local refusal
  refusal=$(run_bin "$BIN/tessera_ps" --device cuda:0 --master tcp://127.0.0.1:1 2>&1 | tail -n 1)
  echo "tessera_ps --device cuda:0: $refusal" >>"$OUT/device_job.log"
  if echo "$refusal" | grep -q "no CUDA device is usable"; then
    row "device job cuda:0 vs cpu" SKIPPED "no usable GPU here"
  elif echo "$refusal" | grep -q "not built yet"; then
    ROWS+=("$(printf '%-34s %-8s %s' "device job cuda:0 vs cpu" MISSING "the roles' GPU paths are not built")")
    FAILED=1
    log "== device job cuda:0 vs cpu: MISSING ($refusal)"
  else
    row "device job cuda:0 vs cpu" FAIL "unexpected answer to --device cuda:0, see device_job.log"
  fi
}
if [ -n "$BIN" ]; then
  device_job_check
else
  row "device job cuda:0 vs cpu" SKIPPED "no binaries"
fi

# ---- 5. summary, last
{
  echo
  echo "==== device checks: $(( $(date +%s) - T0 )) s, $( [ $FAILED = 0 ] && echo 'all steps that ran passed' || echo 'FAILURES')"
  printf '%-34s %-8s %s\n' step result detail
  for r in "${ROWS[@]}"; do echo "$r"; done
  [ -s "$OUT/bitwise.tmp" ] && sed 's/^\[ bitwise  \]/bitwise:/' "$OUT/bitwise.tmp"
  grep -h '"bench":"\(d2d_copy\|forward\|backward_rowwise_adagrad\)"' "$OUT/gpu_bench.jsonl" 2>/dev/null
  grep -h '"bench": "torch_\(d2d_copy\|forward\|backward_adagrad\|backward_rowwise_adagrad\)"' \
    "$OUT/torch_bench.jsonl" 2>/dev/null
} | tee "$OUT/summary.txt" | tee -a "$LOG"
rm -f "$OUT/bitwise.tmp"
exit $FAILED
