#!/usr/bin/env bash
# Builds tessera_kernel_bench in a configured build directory ($1, default
# ./build), runs it and the torch peer single-threaded on the same workload
# (1,000,000 x 64 table, 4096 bags x 20 ids, Zipf 1.05 and uniform ids), and
# prints every JSON line, then ours / torch per mode.
#
# Ours runs twice: with the table on 2 MiB pages (as a row store allocates it)
# and on 4 KiB pages (what the peer's tensors get), so the kernel comparison
# is like for like. Memory-bound figures on a shared host move with the other
# load on it: the load average is printed with the results.
set -euo pipefail

BUILD=${1:-build}
PEER=${TORCH_PEER:-/work/shared/peers/torch_embeddingbag_kernel.py}
PYTHON=/usr/bin/python3
cmake --build "$BUILD" -j2 --target tessera_kernel_bench
BIN="$BUILD/bench/tessera_kernel_bench"

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --zipf 1.05,0 --huge_pages=true | tee "$OUT/ours_huge.jsonl"
"$PYTHON" "$PEER" --threads 1 --zipf 1.05 | tee "$OUT/torch_zipf.jsonl"
"$PYTHON" "$PEER" --threads 1 --zipf 0 --membw-mib 0 | tee "$OUT/torch_uniform.jsonl"
"$BIN" --zipf 1.05,0 --huge_pages=false | tee "$OUT/ours_4k.jsonl"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def load(name):
    with open(os.path.join(out, name)) as f:
        return [json.loads(l) for l in f if l.startswith("{")]
torch = {}
for name in ("torch_zipf.jsonl", "torch_uniform.jsonl"):
    for r in load(name):
        if r["system"] == "torch-embeddingbag" and r["threads"] == 1:
            torch[(r["config"]["zipf"], r["mode"])] = r["lookups_per_s"]
print("\n%-8s %-20s %-6s %12s %12s %7s" % ("pages", "mode", "zipf", "ours M/s", "torch M/s", "ratio"))
for pages, name in (("2MiB", "ours_huge.jsonl"), ("4KiB", "ours_4k.jsonl")):
    for r in load(name):
        peer_mode = "fwd" if r["mode"] == "fwd" else "fwd_bwd_sgd"
        t = torch.get((r["zipf"], peer_mode))
        ratio = "%.2fx" % (r["lookups_per_s"] / t) if t else "-"
        print("%-8s %-20s %-6g %12.1f %12s %7s" % (pages, r["mode"], r["zipf"], r["lookups_per_s"] / 1e6,
              "%.1f" % (t / 1e6) if t else "-", ratio))
PY
