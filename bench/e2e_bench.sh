#!/usr/bin/env bash
# End-to-end benchmark: Tessera and the PyTorch RPC + DDP parameter server
# (../shared/peers/torch_rpc_ps.py) one after the other, on the same
# workloads, on this machine; with --torchrec_python, TorchRec too
# (../shared/peers/torchrec_peer.py). Prints examples/s of each and the ratios.
#
#   W1: 1 master, 1 ps, 2 trainers; 1 table 1,000,000 x 64; batch 512 bags of
#       20 Zipf(1.05) ids per trainer; MLP 512-256-1 on the pooled embedding; SGD
#   W2: the same with 8 tables of 200,000 rows on 2 parameter servers
#
#   bench/e2e_bench.sh [--steps N] [--mode async|sync] [--prefetch] [--workloads "w1 w2"] [--repeats R] [--python]
#                      [--torchrec_python PATH] [--insecure] [--qcomms bf16] [--trainer_cpus split|all]
#
# Every process runs on the OpenBLAS kernels the trainers run on (their
# OPENBLAS_CORETYPE; printed at the start), the peers' torch included.
#
# After each Tessera job it prints the servers' CPU per trainer step and per
# looked-up id, and each C++ trainer's step phases (medians over the timed
# steps: the dense model, the allreduce and optimizer after it, the waits for
# rows and pushes), to stderr.
#
# Each repeat also measures the dense-only limit: the workload's dense model
# alone (build/bench/tessera_dense_bench: forward, backward and SGD, no
# lookups, data or allreduce), one process per trainer side by side, and
# prints Tessera's examples/s as a fraction of their sum (to stderr, and in
# the JSONL as of_dense_only).
#
# Tessera's jobs run with the job's keys (CURVE on every socket, the sealed
# allreduce), as scripts/launch_local.sh starts them; --insecure runs them on
# plain TCP and Gloo's allreduce instead (the mode's label gains "+plain"), as
# the peers run, to compare like for like without encryption. --qcomms bf16
# runs them with training.qcomms bf16 both ways (rows and gradients as
# bfloat16 on the wire; the label gains "+bf16"): not like for like with the
# peers, which send float32.
#
# --trainer_cpus all lets Tessera's trainers run on every CPU (the label gains
# "+cpus_all"); by default scripts/launch_local.sh gives each its own share
# (split). The peers place their processes as their own launchers do.
#
# --python also runs each workload with PyTorch trainers (examples/dlrm_criteo.py
# through tessera.torch, DDP over Gloo; docs/python.md) in the same run, and
# prints their examples/s against the peer's and the C++ trainers'.
#
# --torchrec_python PATH runs the TorchRec peer with that interpreter (a virtual
# environment with torchrec and fbgemm-gpu-cpu: ../shared/peers/README.md) after
# the RPC peer, with the RPC peer's flags (the same workload, --steps, batch and
# id stream; its --ps is ignored: the shards live in its 2 trainer processes),
# twice: its plain loop and --pipeline (TrainPipelineSparseDist). The table and
# the JSONL gain its examples/s and Tessera ÷ the better of its two loops.
# TorchRec is synchronous whatever --mode says. Its JSON lines are kept in
# run/bench/torchrec_W_LOOP.json, its stderr in .log beside them.
#
# Both systems time their steps after a warm-up (the peer: --warmup 20; Tessera:
# the first 20 steps). Tessera runs async by default, the peer's own
# (Hogwild-like) semantics; --mode sync runs Tessera's synchronous mode;
# --prefetch sends each step's lookups during the step before (training.prefetch,
# exact in both modes: the servers answer them once the step before is applied,
# sync, or once the trainer's own push of it is, async). Without it the bench
# turns prefetch off, where a job has it on by default, so that both are
# measured.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEER="${TESSERA_PEER:-$ROOT/../shared/peers/torch_rpc_ps.py}"
TORCHREC_PEER="${TESSERA_TORCHREC_PEER:-$ROOT/../shared/peers/torchrec_peer.py}"
TORCHREC_PY=
STEPS=200
MODE=async
PREFETCH=0
WORKLOADS="w1 w2"
REPEATS=1
PYTHON=0
INSECURE=()
QCOMMS=fp32
TRAINER_CPUS="split"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --prefetch) PREFETCH=1; shift ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --python) PYTHON=1; shift ;;
    --torchrec_python) TORCHREC_PY="$2"; shift 2 ;;
    --insecure) INSECURE=(--insecure); shift ;;
    --qcomms) QCOMMS="$2"; shift 2 ;;
    --trainer_cpus) TRAINER_CPUS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$TORCHREC_PY" ]; then
  if [ ! -f "$TORCHREC_PEER" ]; then
    echo "--torchrec_python: the TorchRec peer $TORCHREC_PEER is missing" >&2
    exit 2
  fi
  if ! "$TORCHREC_PY" -c "import torchrec, fbgemm_gpu" 2>/dev/null; then
    echo "--torchrec_python $TORCHREC_PY cannot import torchrec and fbgemm_gpu (../shared/peers/README.md makes its environment)" >&2
    exit 2
  fi
else
  echo "TorchRec peer: not run (--torchrec_python PATH runs it; ../shared/peers/README.md makes its environment)"
fi
if [ ! -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ] && [ ! -e /usr/lib/aarch64-linux-gnu/openblas-openmp/libblas.so.3 ]; then
  echo "WARNING: libopenblas0-openmp is not installed (../shared/peers/README.md asks for it): the RPC peer runs on" \
    "the system's BLAS, whose threads its torch.set_num_threads may not set" >&2
fi
LABEL="$MODE"
[ "$PREFETCH" = 1 ] && LABEL="$MODE+pf"
[ ${#INSECURE[@]} -gt 0 ] && LABEL="$LABEL+plain"
[ "$QCOMMS" = fp32 ] || LABEL="$LABEL+$QCOMMS"
[ "$TRAINER_CPUS" = split ] || LABEL="$LABEL+cpus_$TRAINER_CPUS"
TARGETS=(--target tessera_master --target tessera_ps --target tessera_trainer --target tessera_dense_bench)
[ "$PYTHON" = 1 ] && TARGETS+=(--target tessera_python)
"$ROOT/scripts/build.sh" "${TARGETS[@]}" >/dev/null
OUT="$ROOT/run/bench"
mkdir -p "$OUT"
# This run's results (results.jsonl keeps every run's), for its plot.
LAST="$OUT/last_results.jsonl"
: >"$LAST"

tessera_run() {  # workload [python] -> examples/s
  local w="$1" ps=1 cfg="$OUT/$1.json" run="$OUT/tessera_$1" trainer=()
  if [ "${2:-}" = python ]; then
    run="$OUT/tessera_py_$1"
    trainer=(--trainer_cmd "$ROOT/examples/dlrm_criteo.py")
  fi
  [ "$w" = w2 ] && ps=2
  python3 - "$ROOT/bench/configs/$w.json" "$cfg" "$((STEPS + 20))" "$MODE" "$PREFETCH" "$QCOMMS" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["training"]["steps"] = int(sys.argv[3]); c["training"]["consistency"] = sys.argv[4]; c["training"]["prefetch"] = sys.argv[5] == "1"
c["training"]["qcomms"] = {"forward_precision": sys.argv[6], "backward_precision": sys.argv[6]}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  PYTHONPATH="${TESSERA_BUILD_DIR:-$ROOT/build}/python" \
    "$ROOT/scripts/launch_local.sh" --ps "$ps" --trainers 2 --config "$cfg" --run_dir "$run" "${trainer[@]}" "${INSECURE[@]}" \
    --trainer_cpus "$TRAINER_CPUS" >/dev/null
  # The servers' compute (their threads' CPU time) per trainer step and per looked-up id (to stderr:
  # stdout is the examples/s).
  python3 - "$run/summary.json" "$w" >&2 <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ps = s["parameter_servers"]
lookups = sum(p["lookups"] for p in ps) / len(ps)
ids = sum(p["ids_looked_up"] for p in ps)
parts = [("lookup", "lookup_compute_ms"), ("backward", "backward_compute_ms"), ("update", "apply_compute_ms")]
per_step = {name: sum(p[key] for p in ps) / lookups for name, key in parts}
per_id = {name: sum(p[key] for p in ps) * 1e6 / ids for name, key in parts}
print("  %s servers, per trainer step: %s ms in all (%s); ns per looked-up id: %s" % (
    sys.argv[2], "%.2f" % sum(per_step.values()),
    ", ".join("%s %.2f" % (n, per_step[n]) for n, _ in parts),
    ", ".join("%s %.0f" % (n, per_id[n]) for n, _ in parts)))
# Where the C++ trainers' steps went: each phase's median over the timed
# steps (the first 20 are the warm-up), per trainer. PyTorch trainers log
# only whole steps.
import glob, os, statistics
phases = [("step", "step_ms"), ("dense", "dense_ms"), ("allreduce+optimizer", "allreduce_ms"),
          ("lookup wait", "lookup_ms"), ("push wait", "push_ms")]
for path in sorted(glob.glob(os.path.join(os.path.dirname(sys.argv[1]), "trainer*.jsonl"))):
    lines = [json.loads(l) for l in open(path)][20:]
    if not lines or "dense_ms" not in lines[0]:
        continue
    print("  %s %s, median ms: %s" % (sys.argv[2], os.path.basename(path)[:-len(".jsonl")], ", ".join(
        "%s %.2f" % (n, statistics.median(l[k] for l in lines)) for n, k in phases)))
PY
  python3 -c "import json;print(round(json.load(open('$run/summary.json'))['examples_per_s']))"
}

# The C++ trainers and this bench's dense model run on the OpenBLAS kernels
# that suit the CPU, not OpenBLAS's generic fallback for a CPU it does not
# know (kernels/blas_core.h). The peers' and the PyTorch trainers' torch loads
# the same OpenBLAS: they are given the same kernels, like for like.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  OPENBLAS_CORETYPE="$("${TESSERA_BUILD_DIR:-$ROOT/build}/bench/tessera_dense_bench" --print_blas_core 2>/dev/null)" ||
    OPENBLAS_CORETYPE=
  [ -n "$OPENBLAS_CORETYPE" ] && export OPENBLAS_CORETYPE || unset OPENBLAS_CORETYPE
fi
echo "OpenBLAS kernels of every process of this run: ${OPENBLAS_CORETYPE:-as OpenBLAS chooses}" >&2

dense_run() {  # workload -> examples/s of the dense model alone, one process per trainer side by side
  local w="$1" trainers pids=() i
  trainers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['cluster']['num_trainers'])" \
    "$ROOT/bench/configs/$w.json")
  for i in $(seq 1 "$trainers"); do
    "${TESSERA_BUILD_DIR:-$ROOT/build}/bench/tessera_dense_bench" --config "$ROOT/bench/configs/$w.json" \
      --seconds 10 >"$OUT/dense_${w}_$i.json" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  python3 -c "import json,sys; print(round(sum(json.load(open(f))['examples_per_s'] for f in sys.argv[1:])))" \
    "$OUT/dense_${w}"_*.json
}

peer_run() {  # workload -> examples/s
  local args=()
  [ "$1" = w2 ] && args=(--tables 8 --ps 2 --num-embeddings 200000)
  if [ ! -f "$PEER" ] || ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "n/a"
    return
  fi
  /usr/bin/python3 "$PEER" --steps "$STEPS" "${args[@]}" 2>/dev/null | tail -n 1 >"$OUT/peer_$1.json"
  # Which BLAS the peer's MLP ran on (to stderr): its README asks for
  # libopenblas0-openmp, whose threads follow its torch.set_num_threads.
  python3 -c "import json,sys;print('  peer', sys.argv[2], 'BLAS:', ' '.join(json.load(open(sys.argv[1]))['config'].get('blas_loaded', ['?'])))" \
    "$OUT/peer_$1.json" "$1" >&2 2>/dev/null || true
  python3 -c "import json,sys;print(round(json.load(open(sys.argv[1]))['examples_per_s']))" "$OUT/peer_$1.json" 2>/dev/null ||
    echo "n/a"
}

torchrec_run() {  # workload plain|pipeline -> examples/s (n/a where it failed: see its .log)
  local args=() loop=() out="$OUT/torchrec_$1_$2"
  [ "$1" = w2 ] && args=(--tables 8 --ps 2 --num-embeddings 200000)
  [ "$2" = pipeline ] && loop=(--pipeline)
  "$TORCHREC_PY" "$TORCHREC_PEER" --steps "$STEPS" "${args[@]}" "${loop[@]}" 2>"$out.log" | tail -n 1 >"$out.json" || true
  python3 -c "import json,sys;print(round(json.load(open(sys.argv[1]))['examples_per_s']))" "$out.json" 2>/dev/null ||
    echo "n/a"
}

ratio() {  # a b -> a / b, or n/a
  python3 -c "print('%.2f' % ($1 / $2))" 2>/dev/null || echo n/a
}

if [ -n "$TORCHREC_PY" ]; then
  printf '%-4s %-8s %14s %14s %7s %14s %14s %7s\n' load mode tessera_ex/s peer_ex/s ratio \
    torchrec_ex/s trec_pipe_ex/s ratio_tr
else
  printf '%-4s %-8s %14s %14s %7s\n' load mode tessera_ex/s peer_ex/s ratio
fi
for w in $WORKLOADS; do
  for _ in $(seq 1 "$REPEATS"); do
    t=$(tessera_run "$w")
    p=$(peer_run "$w")
    ratio=$(ratio "$t" "$p")
    # The dense-only limit (issue 15: the trainers at >= 70% of it on W1).
    d=$(dense_run "$w")
    echo "  $w dense model alone, $d ex/s: Tessera $LABEL at $(ratio "$t" "$d") of it" >&2
    trec=() trec_json=""
    if [ -n "$TORCHREC_PY" ]; then
      tr_plain=$(torchrec_run "$w" plain)
      tr_pipe=$(torchrec_run "$w" pipeline)
      # Tessera against the better of TorchRec's two loops.
      best=$(python3 -c "import sys; v = [float(x) for x in sys.argv[1:] if x != 'n/a']; print(round(max(v)) if v else 'n/a')" "$tr_plain" "$tr_pipe")
      trec=("$tr_plain" "$tr_pipe" "$(ratio "$t" "$best")")
      trec_json=", \"torchrec_examples_per_s\": \"$tr_plain\", \"torchrec_pipeline_examples_per_s\": \"$tr_pipe\""
      printf '%-4s %-8s %14s %14s %7s %14s %14s %7s\n' "$w" "$LABEL" "$t" "$p" "$ratio" "${trec[@]}"
    else
      printf '%-4s %-8s %14s %14s %7s\n' "$w" "$LABEL" "$t" "$p" "$ratio"
    fi
    if [ "$PYTHON" = 1 ]; then
      py=$(tessera_run "$w" python)
      py_trec="" py_trec_json="$trec_json"
      if [ -n "$TORCHREC_PY" ]; then
        py_trec="$(printf ' %14s %14s %7s' "$tr_plain" "$tr_pipe" "$(ratio "$py" "$best")")"
        py_trec_json="$trec_json, \"ratio_torchrec\": \"$(ratio "$py" "$best")\""
      fi
      printf '%-4s %-8s %14s %14s %7s%s   (PyTorch trainers: %s of the C++ trainers)\n' "$w" "$LABEL+py" "$py" "$p" \
        "$(ratio "$py" "$p")" "$py_trec" "$(ratio "$py" "$t")"
      echo "{\"date\": \"$(date -I)\", \"workload\": \"$w\", \"mode\": \"$LABEL+py\", \"steps\": $STEPS, \"tessera_examples_per_s\": $py, \"cpp_examples_per_s\": $t, \"peer_examples_per_s\": \"$p\"$py_trec_json}" | tee -a "$LAST" >>"$OUT/results.jsonl"
    fi
    if [ -n "$TORCHREC_PY" ]; then
      trec_json="$trec_json, \"ratio_torchrec\": \"${trec[2]}\""
    fi
    echo "{\"date\": \"$(date -I)\", \"workload\": \"$w\", \"mode\": \"$LABEL\", \"steps\": $STEPS, \"tessera_examples_per_s\": $t, \"peer_examples_per_s\": \"$p\", \"ratio\": \"$ratio\", \"dense_only_examples_per_s\": $d, \"of_dense_only\": \"$(ratio "$t" "$d")\"$trec_json}" | tee -a "$LAST" >>"$OUT/results.jsonl"
  done
done

# Pictures (Debian's python3-matplotlib; skipped, said, without): the
# ratios of this run, and the Tessera runs' loss, examples/s and step time.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  series=()
  title="examples/s, Tessera $LABEL vs the PyTorch RPC peer (median of $REPEATS)"
  if [ -n "$TORCHREC_PY" ]; then
    series=(--series tessera_examples_per_s=Tessera --series "peer_examples_per_s=PyTorch RPC + DDP peer"
            --series torchrec_examples_per_s=TorchRec --series "torchrec_pipeline_examples_per_s=TorchRec --pipeline")
    title="examples/s, Tessera $LABEL vs the PyTorch RPC peer and TorchRec (median of $REPEATS)"
  fi
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/e2e.png" --title "$title" "${series[@]}"
  runs=()
  for w in $WORKLOADS; do runs+=("$OUT/tessera_$w"); done
  "$ROOT/scripts/plot_run.py" "${runs[@]}" --out "$OUT/plots" >/dev/null && echo "$OUT/plots/*.png"
else
  echo "(no plots: python3-matplotlib is not installed)"
fi
