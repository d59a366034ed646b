#!/usr/bin/env bash
# CTest's examples_dlrm_criteo_test: the PyTorch DLRM of
# examples/dlrm_criteo.py against the C++ trainer, on the same job
# (configs/criteo_dlrm.json, 2 servers, 2 trainers, sync) and the Criteo
# sample: every step's loss of each trainer within 1e-5, the servers'
# tables at the end within 1e-5 (tessera_compare_dumps), the dev AUC within
# 0.005. Skipped (77) where the sample or torch is absent.
#   examples/dlrm_criteo_test.sh BUILD_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
export TESSERA_BUILD_DIR="$BUILD"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
  exit 77
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
code=0
timeout 300 "$ROOT/examples/run_dlrm_criteo.sh" "$WORK/py" -- --dump_dir "$WORK/py/dump" >"$WORK/py.out" 2>&1 || code=$?
if [ "$code" = 77 ]; then
  cat "$WORK/py.out"
  exit 77
elif [ "$code" != 0 ]; then
  tail -30 "$WORK/py.out"
  echo "FAIL: the PyTorch job failed ($code)" >&2
  exit 1
fi
# run_dlrm_criteo.sh asks each PyTorch trainer for a metrics endpoint.
for r in 0 1; do
  grep -q "trainer $r: metrics at http://127.0.0.1:" "$WORK/py/trainer$r.log" || {
    echo "FAIL: PyTorch trainer $r did not say where its metrics are ($WORK/py/trainer$r.log)" >&2
    exit 1
  }
done
timeout 300 "$ROOT/scripts/launch_local.sh" --ps 2 --trainers 2 --config "$ROOT/configs/criteo_dlrm.json" \
  --run_dir "$WORK/cc" -- --dump_dir "$WORK/cc/dump" >"$WORK/cc.out" 2>&1 || {
  tail -30 "$WORK/cc.out"
  echo "FAIL: the C++ job failed" >&2
  exit 1
}
"$BUILD/tests/tessera_compare_dumps" --config "$ROOT/configs/criteo_dlrm.json" --a "$WORK/py/dump" \
  --b "$WORK/cc/dump" --tolerance 1e-5
/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
for r in range(2):
    py = [json.loads(l) for l in open(f"{work}/py/trainer{r}.jsonl")]
    cc = [json.loads(l) for l in open(f"{work}/cc/trainer{r}.jsonl")]
    assert len(py) == len(cc) > 0, (len(py), len(cc))
    worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(py, cc))
    print(f"trainer {r}: {len(py)} steps, max |loss(PyTorch) - loss(C++)| = {worst:.3g}")
    assert worst <= 1e-5, worst
a = json.load(open(f"{work}/py/summary.json"))["eval"]
b = json.load(open(f"{work}/cc/summary.json"))["eval"]
print(f"dev AUC: PyTorch {a['auc']:.6f}, C++ {b['auc']:.6f}; log loss {a['log_loss']:.6f}, {b['log_loss']:.6f}")
assert abs(a["auc"] - b["auc"]) <= 0.005
assert abs(a["log_loss"] - b["log_loss"]) <= 1e-4
PY
echo "PASS"
