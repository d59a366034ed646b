#!/usr/bin/python3
"""A picture of benchmark results: examples/s of Tessera beside its peers.

    scripts/plot_bench.py RESULTS.jsonl [--out FILE.png] [--title TEXT]

RESULTS.jsonl is what bench/e2e_bench.sh appends to run/bench/results.jsonl
(one line per workload, mode and repeat: tessera_examples_per_s and
peer_examples_per_s, and cpp_examples_per_s for PyTorch trainers). Draws,
per workload and mode, the median over repeats of each system as bars, with
the Tessera ÷ peer ratio above them and the spread of repeats as error bars,
so that a result is read as a ratio measured in one run, not as an absolute
figure. Writes --out (default: beside RESULTS, e2e.png). Needs
python3-matplotlib (Debian's, hence /usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import sys


def number(value):
    """A figure of the results file, or None where it says n/a."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_results(path):
    groups = {}  # (workload, mode) -> {"tessera": [...], "peer": [...]}
    order = []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        raise SystemExit("%s: %s" % (path, e.strerror))
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (row["workload"], row["mode"])
            tessera = number(row["tessera_examples_per_s"])
        except (ValueError, KeyError, TypeError) as e:
            raise SystemExit("%s:%d: not a result line (%s)" % (path, n, e))
        if tessera is None:
            raise SystemExit("%s:%d: tessera_examples_per_s is not a number" % (path, n))
        if key not in groups:
            groups[key] = {"tessera": [], "peer": []}
            order.append(key)
        groups[key]["tessera"].append(tessera)
        peer = number(row.get("peer_examples_per_s"))
        if peer is not None:
            groups[key]["peer"].append(peer)
    if not order:
        raise SystemExit("%s: no results" % path)
    return order, groups


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", metavar="RESULTS.jsonl")
    parser.add_argument("--out", help="the PNG (default: e2e.png beside RESULTS)")
    parser.add_argument("--title", default="End to end: examples/s (median of repeats)")
    args = parser.parse_args(argv)
    order, groups = read_results(args.results)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_bench.py needs matplotlib: apt-get install python3-matplotlib")

    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(order)), 4.5))
    width = 0.38
    for i, key in enumerate(order):
        g = groups[key]
        for offset, system, colour in ((-width / 2, "tessera", "C0"), (width / 2, "peer", "C1")):
            values = g[system]
            if not values:
                continue
            median = statistics.median(values)
            spread = [[median - min(values)], [max(values) - median]]
            ax.bar(i + offset, median, width, color=colour, yerr=spread if len(values) > 1 else None, capsize=3,
                   label={"tessera": "Tessera", "peer": "PyTorch RPC + DDP peer"}[system] if i == 0 else None)
        if g["peer"]:
            ratio = statistics.median(g["tessera"]) / statistics.median(g["peer"])
            top = max(statistics.median(g["tessera"]), statistics.median(g["peer"]))
            ax.annotate("%.2f×" % ratio, (i, top), textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(["%s\n%s" % key for key in order])
    ax.set_ylabel("examples/s")
    ax.set_title(args.title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    ax.legend()
    fig.tight_layout()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.results)), "e2e.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
