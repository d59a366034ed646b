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
#    (parameters within 1e-4), with an evicting GPU tier and with whole shards;
#    each job's step-20 checkpoint exported (tessera_export) against the CPU's
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
  ROWS+=("$(printf '%-42s %-8s %s' "$1" "$2" "$3")")
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
if [ ! -d "$ROOT/bundle/bin" ] && [ -s "$ROOT/bundle.tar.xz" ]; then
  xz -dc "$ROOT/bundle.tar.xz" | tar -C "$ROOT" -xf - && log "unpacked bundle.tar.xz"
fi
if [ -d "$ROOT/bundle/bin" ]; then
  BIN="$ROOT/bundle/bin"
  LIBPATH="$ROOT/bundle/lib"
  row "binaries" ok "from bundle/ ($(du -sh "$ROOT/bundle" | cut -f1))"
elif command -v cmake >/dev/null; then
  B="$ROOT/build-gpu"
  if timeout 120 cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON >>"$LOG" 2>&1 &&
    timeout 420 cmake --build "$B" -j"$(nproc)" --target kernels_device_cuda_test kernels_embedding_bag_cuda_test \
      kernels_dedup_cuda_test kernels_sparse_optimizer_cuda_test kernels_dense_ops_cuda_test \
      kernels_embedding_bag_test kernels_dedup_test kernels_sparse_optimizer_test kernels_device_choice_test \
      ps_gpu_tier_test trainer_dlrm_model_cuda_test trainer_dense_optimizer_cuda_test trainer_collective_nccl_test \
      tessera_gpu_bench \
      tessera_master tessera_ps tessera_trainer tessera_compare_dumps tessera_export >>"$LOG" 2>&1; then
    BIN="$B/bin-flat"
    mkdir -p "$BIN"
    find "$B" -type f -perm -u+x \( -name '*_test' -o -name 'tessera_*' \) -not -path '*/CMakeFiles/*' \
      -exec ln -sf {} "$BIN/" \;
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
# NCCL likewise (the machine's, else PyTorch's): a trainer opens it when every
# trainer has a GPU of its own. The device job's two trainers share one GPU
# and do without it, so a missing NCCL fails nothing here.
NCCL_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/local/lib \
  $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s) for p in nvidia.__path__ for s in ("nccl/lib", "cu13/lib")))' 2>/dev/null); do
  if [ -e "$d/libnccl.so.2" ]; then
    NCCL_DIR="$d"
    break
  fi
done
[ -z "$NCCL_DIR" ] && NCCL_DIR="$(dirname "$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)"
log "NCCL from: ${NCCL_DIR:-not found}"
[ -n "$NCCL_DIR" ] && [ "$NCCL_DIR" != "$CUBLAS_DIR" ] && LIBPATH="$LIBPATH:$NCCL_DIR"
# The bundle's binaries were built against Debian 12's libstdc++ (GCC 12); an
# older system one is replaced by the copy in bundle/lib/compat.
if [ -n "$BIN" ] && [ -d "$ROOT/bundle/lib/compat" ] &&
  ! env LD_LIBRARY_PATH="$LIBPATH" "$BIN/kernels_device_cuda_test" --gtest_list_tests >/dev/null 2>&1; then
  LIBPATH="$LIBPATH:$ROOT/bundle/lib/compat"
  log "using bundle/lib/compat (system libstdc++ too old)"
fi
run_bin() { env LD_LIBRARY_PATH="$LIBPATH" "$@"; }

# Is there a GPU to check on? The server says why not when asked for one.
NO_GPU=""
if [ -n "$BIN" ] && [ -e "$BIN/tessera_ps" ]; then
  probe=$(run_bin timeout 20 "$BIN/tessera_ps" --device cuda:0 --master tcp://127.0.0.1:1 --register_timeout_ms 1 2>&1 |
    tail -n 1)
  if echo "$probe" | grep -q "no CUDA device is usable"; then
    NO_GPU="${probe#*no CUDA device is usable: }"
    row "GPU" FAIL "none usable here ($NO_GPU): the GPU steps below are skipped or emulated, nothing is verified"
  fi
fi

# ---- 2. tests
if [ -n "$BIN" ]; then
  : >"$OUT/tests.log"
  for t in "$BIN"/*cuda_test "$BIN"/ps_gpu_tier_test "$BIN"/trainer_collective_nccl_test "$BIN"/kernels_device_choice_test \
    "$BIN"/kernels_embedding_bag_test "$BIN"/kernels_dedup_test "$BIN"/kernels_sparse_optimizer_test; do
    [ -e "$t" ] || continue
    name="$(basename "$t")"
    timeout 300 env LD_LIBRARY_PATH="$LIBPATH" "$t" --gtest_color=no >"$OUT/$name.tmp" 2>&1
    rc=$?
    cat "$OUT/$name.tmp" >>"$OUT/tests.log"
    passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$OUT/$name.tmp" | tail -1)
    skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$OUT/$name.tmp" | tail -1)
    failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$OUT/$name.tmp" | tail -1)
    detail="passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0}"
    # 77: every test of the binary skipped (tests/support/gtest_main.cc).
    if { [ $rc -eq 0 ] || [ $rc -eq 77 ]; } && grep -q 'no CUDA device: ' "$OUT/$name.tmp"; then
      if [ -n "$NO_GPU" ]; then
        row "$name" SKIPPED "$detail (no usable GPU here)"
      else
        row "$name" FAIL "$detail: skipped on a GPU machine: $(grep -m1 'no CUDA device: ' "$OUT/$name.tmp")"
      fi
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
# 2-trainer, 2-server job (tests/gpu/device_job.json) on the CPU, then with
# every process on --device cuda:0, twice: once with a GPU tier too small for
# the shards (rows evicted to host memory and fetched back), once with whole
# shards on the GPU. Parameters must match the CPU job's within 1e-4. The two
# trainers share the one GPU, so their allreduce goes through host memory
# (NCCL cannot put two ranks on one GPU); the logs say so.
device_job_check() {
  local b
  for b in tessera_master tessera_ps tessera_trainer tessera_compare_dumps; do
    if [ ! -e "$BIN/$b" ]; then
      row "device job cuda:0 vs cpu" SKIPPED "$b not in the bundle/build"
      return
    fi
  done
  # Without a GPU the same steps run with the GPU tier's logic on the host
  # (--gpu_tier_on_host) and the trainers on the CPU: that checks this script
  # and the tier's logic, not the GPU.
  local dev="--device cuda:0" tier_bytes=""
  if [ -n "$NO_GPU" ]; then
    dev="--device cpu"
    tier_bytes="--gpu_tier_on_host --gpu_bytes 1000000000"
  fi
  local J=/tmp/tessera_device_job config="$ROOT/tests/gpu/device_job.json"
  rm -rf "$J"
  mkdir -p "$J"
  : >"$OUT/device_job.log"
  # name, ps flags, trainer flags. Each job also takes a checkpoint at step
  # 20 (its own copy of the config names its own checkpoint folder), which
  # step 4b exports: the GPU tier's rows must reach the checkpoint.
  run_job() {
    local name="$1" t0=$SECONDS rc
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["checkpoint"]={"dir": sys.argv[2], "every_steps": 20, "keep": 1}; json.dump(c, open(sys.argv[3], "w"))' \
      "$config" "$J/$name/ckpt" "$J/$name.json" || return 1
    LD_LIBRARY_PATH="$LIBPATH" TESSERA_BIN_DIR="$BIN" timeout 150 "$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 \
      --config "$J/$name.json" --run_dir "$J/$name" --ps_flags "$2" --trainer_flags "$3" --timeout_s 120 \
      -- --dump_dir "$J/$name/dump" >>"$OUT/device_job.log" 2>&1
    rc=$?
    for f in "$J/$name"/*.log; do
      echo "---- $name/$(basename "$f") (last 15 lines)"
      tail -n 15 "$f"
    done >>"$OUT/device_job.log"
    echo "$name: exit $rc in $((SECONDS - t0)) s" >>"$OUT/device_job.log"
    return $rc
  }
  if ! run_job cpu "" ""; then
    row "device job: cpu reference" FAIL "see device_job.log"
    return
  fi
  local name ps_flags detail evictions label
  for name in gpu_tier_evicting gpu_whole_shards; do
    ps_flags="$dev $tier_bytes"
    [ "$name" = gpu_tier_evicting ] && ps_flags="$dev ${tier_bytes:+--gpu_tier_on_host} --gpu_bytes 1 --gpu_tier_min_rows 2048"
    label="device job $name"
    [ -n "$NO_GPU" ] && label="$label (emulated)"
    if ! run_job "$name" "$ps_flags" "$dev"; then
      row "$label" FAIL "the job failed, see device_job.log"
      continue
    fi
    detail=$(run_bin "$BIN/tessera_compare_dumps" --config "$config" --a "$J/cpu/dump" --b "$J/$name/dump" \
      --tolerance 1e-4 2>&1)
    local rc=$?
    echo "$name vs cpu: $detail" >>"$OUT/device_job.log"
    evictions=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(sum(t["evictions"] for p in s["parameter_servers"] for sh in p["shards"] for t in sh["tiers"] if t["tier"]=="gpu"))' \
      "$J/$name/summary.json" 2>/dev/null)
    if [ $rc -eq 0 ]; then
      row "$label" ok "${detail%%;*}; GPU-tier evictions ${evictions:-?}"
    else
      row "$label" FAIL "$detail"
    fi
    export_check "$name" "$label"
  done
  grep -h "allreduce goes through host memory\|running on cuda\|GPU tier of" "$J"/gpu_*/*.log 2>/dev/null | sort -u | head -n 8 >>"$LOG"
}
# ---- 4b. The step-20 checkpoint of a GPU job, exported (tessera_export, npy)
# against the CPU job's: every tensor (rows and optimizer state) of the same
# shape and within 1e-4, or relatively 1e-4 where values are large (Adam's).
export_check() {
  local name="$1" label="export: $1 vs cpu" J=/tmp/tessera_device_job
  if [ ! -e "$BIN/tessera_export" ]; then
    row "$label" SKIPPED "tessera_export not in the bundle/build"
    return
  fi
  local side
  for side in cpu "$name"; do
    [ -d "$J/$side/export" ] && continue
    if ! run_bin "$BIN/tessera_export" --checkpoint "$J/$side/ckpt" --format npy --out "$J/$side/export" \
      >>"$OUT/device_job.log" 2>&1; then
      row "$label" FAIL "tessera_export of $side failed, see device_job.log"
      return
    fi
  done
  local detail
  if detail=$(python3 - "$J/cpu/export" "$J/$name/export" 2>&1 <<'PY'
import json, os, sys
import numpy as np
a_dir, b_dir = sys.argv[1], sys.argv[2]
names = sorted(f for f in os.listdir(a_dir) if f.endswith(".npy"))
if sorted(f for f in os.listdir(b_dir) if f.endswith(".npy")) != names:
    sys.exit("the two exports hold different tensors")
worst, worst_name, elements = 0.0, "", 0
for f in names:
    a, b = np.load(os.path.join(a_dir, f)), np.load(os.path.join(b_dir, f))
    if a.shape != b.shape:
        sys.exit(f"{f}: shape {a.shape} vs {b.shape}")
    if a.size == 0:
        continue
    d = float(np.max(np.abs(a.astype(np.float64) - b) / np.maximum(1.0, np.abs(a))))
    elements += a.size
    if d > worst:
        worst, worst_name = d, f
if worst > 1e-4:
    sys.exit(f"{worst_name}: differs by {worst:.3g} (relative where |x|>1) > 1e-4")
print(f"{len(names)} tensors, {elements} elements, worst {worst:.3g} ({worst_name or '-'})")
PY
  ); then
    row "$label" ok "$detail"
  else
    row "$label" FAIL "$detail"
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
  printf '%-42s %-8s %s\n' step result detail
  for r in "${ROWS[@]}"; do echo "$r"; done
  [ -s "$OUT/bitwise.tmp" ] && sed 's/^\[ bitwise  \]/bitwise:/' "$OUT/bitwise.tmp"
  grep -h '"bench":"\(d2d_copy\|forward\|backward_rowwise_adagrad\)"' "$OUT/gpu_bench.jsonl" 2>/dev/null
  grep -h '"bench": "torch_\(d2d_copy\|forward\|backward_adagrad\|backward_rowwise_adagrad\)"' \
    "$OUT/torch_bench.jsonl" 2>/dev/null
} | tee "$OUT/summary.txt" | tee -a "$LOG"
rm -f "$OUT/bitwise.tmp"
exit $FAILED
