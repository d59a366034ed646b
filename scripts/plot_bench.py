#!/usr/bin/python3
"""A picture of benchmark results: examples/s of Tessera beside a peer.

    scripts/plot_bench.py RESULTS.jsonl [--series KEY=LABEL --series KEY=LABEL]
                          [--out FILE.png] [--title TEXT]

RESULTS.jsonl holds a benchmark's lines (bench/e2e_bench.sh's, by default:
tessera_examples_per_s beside peer_examples_per_s; bench/tier_e2e_bench.sh
and bench/curve_bench.sh name theirs with --series). Each line has a
workload and/or mode, and per series a number, a number in a string, or a
list of repeats; "n/a" is a peer that could not run. Draws, per workload and
mode, the median over repeats of each series as bars, with the first ÷
second ratio above them and the spread of repeats as error bars, so that a
result is read as a ratio measured in one run, not as an absolute figure.
Writes --out (default: beside RESULTS, e2e.png). Needs python3-matplotlib
(Debian's, hence /usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import sys


DEFAULT_SERIES = [("tessera_examples_per_s", "Tessera"), ("peer_examples_per_s", "PyTorch RPC + DDP peer")]


def numbers(value):
    """The figures of one field: a number, a number in a string or a list of
    them; none where it says n/a."""
    if isinstance(value, list):
        return [x for v in value for x in numbers(v)]
    try:
        return [float(value)]
    except (TypeError, ValueError):
        return []


def read_results(path, series):
    groups = {}  # (workload, mode) -> {key: [...]}
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
            if not isinstance(row, dict) or not ("workload" in row or "mode" in row):
                raise ValueError("no workload or mode")
            key = (str(row.get("workload", "")), str(row.get("mode", "")))
            first = numbers(row[series[0][0]])
        except (ValueError, KeyError, TypeError) as e:
            raise SystemExit("%s:%d: not a result line (%s)" % (path, n, e))
        if not first:
            raise SystemExit("%s:%d: %s is not a number" % (path, n, series[0][0]))
        if key not in groups:
            groups[key] = {k: [] for k, _ in series}
            order.append(key)
        groups[key][series[0][0]] += first
        for k, _ in series[1:]:
            groups[key][k] += numbers(row.get(k))
    if not order:
        raise SystemExit("%s: no results" % path)
    return order, groups


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", metavar="RESULTS.jsonl")
    parser.add_argument("--series", action="append", metavar="KEY=LABEL",
                        help="a field to draw and its label; the first two give the ratio "
                             "(default: tessera_examples_per_s=Tessera, peer_examples_per_s=the RPC peer)")
    parser.add_argument("--out", help="the PNG (default: e2e.png beside RESULTS)")
    parser.add_argument("--title", default="End to end: examples/s (median of repeats)")
    args = parser.parse_args(argv)
    series = DEFAULT_SERIES
    if args.series:
        if len(args.series) < 2 or any("=" not in s for s in args.series):
            raise SystemExit("--series KEY=LABEL, at least twice")
        series = [tuple(s.split("=", 1)) for s in args.series]
    order, groups = read_results(args.results, series)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_bench.py needs matplotlib: apt-get install python3-matplotlib")

    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(order)), 4.5))
    width = 0.8 / len(series)
    labelled = set()
    for i, key in enumerate(order):
        g = groups[key]
        for k, (field, label) in enumerate(series):
            values = g[field]
            if not values:
                continue
            median = statistics.median(values)
            spread = [[median - min(values)], [max(values) - median]]
            ax.bar(i + (k - (len(series) - 1) / 2) * width, median, width, color="C%d" % k,
                   yerr=spread if len(values) > 1 else None, capsize=3,
                   label=label if field not in labelled else None)
            labelled.add(field)
        a, b = g[series[0][0]], g[series[1][0]]
        if a and b:
            ratio = statistics.median(a) / statistics.median(b)
            top = max(statistics.median(g[f]) for f, _ in series if g[f])
            ax.annotate("%.2f×" % ratio, (i, top), textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(["\n".join(part for part in key if part) for key in order])
    ax.set_ylabel("examples/s")
    ax.set_title(args.title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    # Below the axes: above them it would cover the ratios.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(series), frameon=False)
    fig.tight_layout()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.results)), "e2e.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
