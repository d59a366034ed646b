#!/usr/bin/env bash
# scripts/plot_run.py on two small run folders written here: three PNGs for
# the pair, and a clear error (file and line) for a damaged metrics file.
# Skipped (exit 77) where Debian's python3-matplotlib is not installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "SKIPPED: python3-matplotlib is not installed"
  exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
for run in a b; do
  mkdir -p "$dir/$run"
  for r in 0 1; do
    /usr/bin/python3 - "$dir/$run/trainer$r.jsonl" "$run" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for step in range(120):
        f.write(json.dumps({"step": step, "loss": 0.7 * math.exp(-step / 60) + (0.05 if sys.argv[2] == "b" else 0),
                            "examples_per_s": 20000 + 10 * step, "step_ms": 3.0, "data_ms": 0.1,
                            "lookup_ms": 0.8, "dense_ms": 0.4, "allreduce_ms": 1.2, "push_ms": 0.1}) + "\n")
        if step % 40 == 39 and step < 119:  # evaluations while training (training.eval_every)
            f.write(json.dumps({"step": step, "eval": {"examples": 400, "log_loss": 0.6, "auc": 0.6 + step / 1000}}) + "\n")
PY
  done
  echo '{"examples_per_s": 40000, "eval": {"auc": 0.7, "log_loss": 0.5}}' >"$dir/$run/summary.json"
done

"$ROOT/scripts/plot_run.py" "$dir/a" "$dir/b" --out "$dir/plots" --smooth 10
for png in loss examples_per_s step_time; do
  f="$dir/plots/$png.png"
  [ -s "$f" ] || { echo "FAIL: $f was not written" >&2; exit 1; }
  # A PNG starts with \x89PNG.
  [ "$(head -c 4 "$f" | tail -c 3)" = "PNG" ] || { echo "FAIL: $f is not a PNG" >&2; exit 1; }
done

echo '{"step": 120, "loss": ' >>"$dir/b/trainer1.jsonl"
if out=$("$ROOT/scripts/plot_run.py" "$dir/b" --out "$dir/bad" 2>&1); then
  echo "FAIL: a damaged metrics file was plotted" >&2
  exit 1
fi
echo "$out" | grep -q "trainer1.jsonl:123: not JSON" || { echo "FAIL: unclear error: $out" >&2; exit 1; }
if out=$("$ROOT/scripts/plot_run.py" "$dir/nothing" 2>&1); then
  echo "FAIL: a missing run folder was plotted" >&2
  exit 1
fi
echo "$out" | grep -q "nothing: no such run folder" || { echo "FAIL: unclear error: $out" >&2; exit 1; }
echo "PASS: three PNGs for two runs; damaged and missing inputs refused"

# scripts/plot_bench.py: bench/e2e_bench.sh's results, repeats and a peer
# that could not run (n/a) included; a damaged line is named.
cat >"$dir/results.jsonl" <<'JSONL'
{"workload": "w1", "mode": "sync", "steps": 200, "tessera_examples_per_s": 70000, "peer_examples_per_s": "48000", "ratio": "1.46"}
{"workload": "w1", "mode": "sync", "steps": 200, "tessera_examples_per_s": 72000, "peer_examples_per_s": "47000", "ratio": "1.53"}
{"workload": "w2", "mode": "sync", "steps": 200, "tessera_examples_per_s": 30000, "peer_examples_per_s": "n/a", "ratio": "n/a"}
JSONL
"$ROOT/scripts/plot_bench.py" "$dir/results.jsonl" --out "$dir/e2e.png"
[ "$(head -c 4 "$dir/e2e.png" | tail -c 3)" = "PNG" ] || { echo "FAIL: e2e.png is not a PNG" >&2; exit 1; }
echo '{"workload": "w1", "mode": ' >>"$dir/results.jsonl"
if out=$("$ROOT/scripts/plot_bench.py" "$dir/results.jsonl" --out "$dir/bad.png" 2>&1); then
  echo "FAIL: a damaged results file was plotted" >&2
  exit 1
fi
echo "$out" | grep -q "results.jsonl:4: not a result line" || { echo "FAIL: unclear error: $out" >&2; exit 1; }
# Other benches' series: curve_bench.sh's lists of repeats.
echo '{"workload": "w2", "mode": "async", "curve": [37000, 37400], "plain": [41000, 41900], "ratio": 0.89}' >"$dir/curve.jsonl"
"$ROOT/scripts/plot_bench.py" "$dir/curve.jsonl" --out "$dir/curve.png" --series "curve=CURVE" --series "plain=plain"
[ "$(head -c 4 "$dir/curve.png" | tail -c 3)" = "PNG" ] || { echo "FAIL: curve.png is not a PNG" >&2; exit 1; }
if out=$("$ROOT/scripts/plot_bench.py" "$dir/curve.jsonl" --out "$dir/bad.png" 2>&1); then
  echo "FAIL: curve results were read as e2e results" >&2
  exit 1
fi
echo "$out" | grep -q "curve.jsonl:1: not a result line" || { echo "FAIL: unclear error: $out" >&2; exit 1; }
echo "PASS: a benchmark plot from results with repeats and a missing peer; a damaged line refused; other series"

# Panels of their own unit beside the bars (bench/checkpoint_bench.sh's).
echo '{"workload": "w2", "mode": "async", "on_examples_per_s": 11600, "off_examples_per_s": 10500, "pause_s": 0.25, "trainer_pause_s": -0.01}' >"$dir/ckpt.jsonl"
"$ROOT/scripts/plot_bench.py" "$dir/ckpt.jsonl" --out "$dir/ckpt.png" --series "on_examples_per_s=on" \
  --series "off_examples_per_s=off" --panel "pause (s)" --series "pause_s=pause" --series "trainer_pause_s=lost"
[ "$(head -c 4 "$dir/ckpt.png" | tail -c 3)" = "PNG" ] || { echo "FAIL: ckpt.png is not a PNG" >&2; exit 1; }
# Lines against a field, one per value of another, in panels, an event
# marked (bench/delay_bench.sh's, bench/soak.sh's); a repeated x is a spread.
cat >"$dir/delay.jsonl" <<'JSONL'
{"delay_ms_each_way": 0.0, "prefetch": false, "examples_per_s": 42000, "lookup_ms": 7.9}
{"delay_ms_each_way": 0.0, "prefetch": true, "examples_per_s": 48000, "lookup_ms": 0.2}
{"delay_ms_each_way": 5.0, "prefetch": false, "examples_per_s": 22000, "lookup_ms": 20.8}
{"delay_ms_each_way": 5.0, "prefetch": false, "examples_per_s": 23000, "lookup_ms": 20.1}
{"delay_ms_each_way": 5.0, "prefetch": true, "examples_per_s": 39000, "lookup_ms": 0.1}
JSONL
"$ROOT/scripts/plot_bench.py" "$dir/delay.jsonl" --out "$dir/delay.png" --x "delay_ms_each_way=delay (ms)" \
  --by prefetch --series "examples_per_s=examples/s" --panel "lookup (ms)" --series "lookup_ms=lookup" \
  --linear "linear" --mark "2.5=an event" --stairs --logy
[ "$(head -c 4 "$dir/delay.png" | tail -c 3)" = "PNG" ] || { echo "FAIL: delay.png is not a PNG" >&2; exit 1; }
echo '{"prefetch": true, "examples_per_s": 39000}' >>"$dir/delay.jsonl"
if out=$("$ROOT/scripts/plot_bench.py" "$dir/delay.jsonl" --out "$dir/bad.png" --x "delay_ms_each_way=delay" \
  --series "examples_per_s=examples/s" 2>&1); then
  echo "FAIL: a line without x was plotted" >&2
  exit 1
fi
echo "$out" | grep -q "delay.jsonl:6: not a result line" || { echo "FAIL: unclear error: $out" >&2; exit 1; }
if out=$("$ROOT/scripts/plot_bench.py" "$dir/delay.jsonl" --out "$dir/bad.png" --panel "ms" 2>&1); then
  echo "FAIL: a panel without series was accepted" >&2
  exit 1
fi
echo "PASS: panels beside bars; lines by a field, in panels, marked; a line without x refused"
