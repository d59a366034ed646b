#!/usr/bin/python3
"""A picture of benchmark results: examples/s of Tessera beside a peer, or any
figures of a bench as bars or as lines.

    scripts/plot_bench.py RESULTS.jsonl [--series KEY=LABEL --series KEY=LABEL]
                          [--out FILE.png] [--title TEXT] [--ylabel TEXT]
                          [--panel YLABEL --series KEY=LABEL ...]
                          [--x KEY=LABEL [--by KEY] [--linear LABEL] [--mark X=LABEL] [--stairs]]
                          [--logy]

RESULTS.jsonl holds a benchmark's lines (bench/e2e_bench.sh's, by default:
tessera_examples_per_s beside peer_examples_per_s; the other benches name
theirs with --series). Each line has per series a number, a number in a
string, or a list of repeats; "n/a" is a peer that could not run.

Bars (the default): each line has a workload and/or mode. Draws, per
workload and mode, the median over repeats of each series as bars, with the
first ÷ second ratio above them and the spread of repeats as error bars, so
that a result is read as a ratio measured in one run, not as an absolute
figure.

Lines (--x KEY=LABEL): each line has a number at KEY; draws each series
against it (the median of the lines at one x, their spread as error bars),
one line per value of --by KEY where given (a process, a setting);
--linear LABEL adds the first series scaled in proportion to x from its
smallest x (linear scaling), --mark X=LABEL a vertical line at X (an event),
--stairs draws each point as holding since the point before (a time per
step, where x is when the step ended), --logy a logarithmic y axis.

--panel YLABEL starts another panel (beside the bars, below the lines) for
the --series that follow, with a y axis of its own (another unit); the
series before the first --panel go in the first, labelled --ylabel
(default examples/s). The ratio is that of the first panel's first two
series. Every line must have the first series; the others may be missing.
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


def by_name(field, value):
    """A --by value as a label: a string as it is (a process's name), anything
    else after the field's name (prefetch: true)."""
    return value if isinstance(value, str) else "%s: %s" % (field, json.dumps(value))


def read_results(path, series, x=None, by=None):
    """Bars: (workload, mode) -> {key: [...]}. Lines (x given): (by value, x) ->
    {key: [...]}. Returns the keys in the order first seen, and the groups."""
    groups = {}
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
            if not isinstance(row, dict):
                raise ValueError("not an object")
            if x is None:
                if not ("workload" in row or "mode" in row):
                    raise ValueError("no workload or mode")
                key = (str(row.get("workload", "")), str(row.get("mode", "")))
            else:
                at = numbers(row[x])
                if len(at) != 1:
                    raise ValueError("%s is not a number" % x)
                key = (by_name(by, row.get(by, "")) if by else "", at[0])
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


class Layout(argparse.Action):
    """--series and --panel in the order given: [[ylabel, [(key, label)...]]...]."""

    def __call__(self, parser, namespace, value, option_string=None):
        panels = getattr(namespace, "panels", None)
        if panels is None:
            panels = [[None, []]]
            namespace.panels = panels
        if self.dest == "panel":
            panels.append([value, []])
        elif "=" not in value:
            parser.error("--series KEY=LABEL")
        else:
            panels[-1][1].append(tuple(value.split("=", 1)))


def pair(parser, text, what):
    if "=" not in text:
        parser.error("%s KEY=LABEL" % what)
    return text.split("=", 1)


def spread(values):
    median = statistics.median(values)
    return median, ([[median - min(values)], [max(values) - median]] if len(values) > 1 else None)


def draw_bars(ax, order, groups, series, first_color, ratio):
    width = 0.8 / len(series)
    for k, (field, label) in enumerate(series):
        shown = False
        for i, key in enumerate(order):
            values = groups[key][field]
            if not values:
                continue
            median, err = spread(values)
            ax.bar(i + (k - (len(series) - 1) / 2) * width, median, width, color="C%d" % (first_color + k),
                   yerr=err, capsize=3, label=None if shown else label)
            shown = True
    if ratio:
        for i, key in enumerate(order):
            g = groups[key]
            a, b = g[series[0][0]], g[series[1][0]]
            if a and b and statistics.median(b):
                top = max(statistics.median(g[f]) for f, _ in series if g[f])
                ax.annotate("%.2f×" % (statistics.median(a) / statistics.median(b)), (i, top),
                            textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(["\n".join(part for part in key if part) for key in order])
    ax.grid(axis="y", alpha=0.3)
    low, high = ax.get_ylim()
    ax.set_ylim(min(0, low), high * 1.1)


def draw_lines(ax, order, groups, series, linear, stairs):
    lines = []  # by values, in the order first seen
    few = len({x for _, x in order}) < 30  # settings, not a time series: marked
    for by, _ in order:
        if by not in lines:
            lines.append(by)
    for k, (field, label) in enumerate(series):
        for j, by in enumerate(lines):
            pts = sorted((x, groups[(b, x)][field]) for b, x in order if b == by and groups[(b, x)][field])
            if not pts:
                continue
            medians = [spread(v)[0] for _, v in pts]
            name = ", ".join(part for part in (label if len(series) > 1 or not by else "", by) if part)
            many = any(len(v) > 1 for _, v in pts)
            ax.errorbar([x for x, _ in pts], medians, capsize=3, color="C%d" % (j * len(series) + k), label=name,
                        marker="o" if few else None, markersize=4,
                        drawstyle="steps-pre" if stairs else "default",
                        yerr=[[m - min(v) for m, (_, v) in zip(medians, pts)],
                              [max(v) - m for m, (_, v) in zip(medians, pts)]] if many else None)
            if linear and k == 0:
                x0, y0 = pts[0][0], medians[0]
                if x0:
                    ax.plot([x for x, _ in pts], [y0 * x / x0 for x, _ in pts], "--", color="grey",
                            label=linear if j == 0 else None)
    ax.grid(alpha=0.3)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", metavar="RESULTS.jsonl")
    parser.add_argument("--series", action=Layout, metavar="KEY=LABEL",
                        help="a field to draw and its label; in bars, the first two give the ratio "
                             "(default: tessera_examples_per_s=Tessera, peer_examples_per_s=the RPC peer)")
    parser.add_argument("--panel", action=Layout, metavar="YLABEL",
                        help="a panel of its own, its y axis labelled YLABEL, for the --series that follow")
    parser.add_argument("--out", help="the PNG (default: e2e.png beside RESULTS)")
    parser.add_argument("--title", default="End to end: examples/s (median of repeats)")
    parser.add_argument("--ylabel", default="examples/s", help="the first panel's y axis (default: examples/s)")
    parser.add_argument("--x", metavar="KEY=LABEL", help="lines against this field instead of bars")
    parser.add_argument("--by", metavar="KEY", help="lines: one line per value of this field")
    parser.add_argument("--linear", metavar="LABEL", help="lines: the first series scaled with x from its first point")
    parser.add_argument("--mark", action="append", default=[], metavar="X=LABEL", help="lines: a vertical line at X")
    parser.add_argument("--stairs", action="store_true",
                        help="lines: each point holds since the point before (a time per step)")
    parser.add_argument("--logy", action="store_true", help="a logarithmic y axis")
    args = parser.parse_args(argv)
    panels = [p for p in getattr(args, "panels", None) or [] if p[1]]
    if not panels:
        if getattr(args, "panels", None):
            raise SystemExit("--panel without --series")
        panels = [[None, DEFAULT_SERIES]]
    panels[0][0] = panels[0][0] or args.ylabel
    if any(not p[0] for p in panels):
        raise SystemExit("--panel YLABEL, then its --series")
    x = pair(parser, args.x, "--x") if args.x else None
    marks = []
    for m in args.mark:
        at, label = pair(parser, m, "--mark")
        if not numbers(at):
            raise SystemExit("--mark %s: %s is not a number" % (m, at))
        marks.append((float(at), label))
    series = [s for _, ss in panels for s in ss]
    if len({k for k, _ in series}) != len(series):
        raise SystemExit("a field in two --series")
    order, groups = read_results(args.results, series, x[0] if x else None, args.by)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_bench.py needs matplotlib: apt-get install python3-matplotlib")

    n = len(panels)
    if x:
        fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 + 2.6 * n), sharex=True, squeeze=False)
    else:
        fig, axes = plt.subplots(1, n, figsize=(n * max(6, 1.8 * len(order)), 4.5), squeeze=False)
    axes = axes.ravel()
    shown, color = set(), 0
    for ax, (ylabel, ss) in zip(axes, panels):
        if x:
            draw_lines(ax, order, groups, ss, args.linear if ax is axes[0] else None, args.stairs)
            for at, label in marks:
                ax.axvline(at, color="black", linestyle=":", linewidth=1)
                if ax is axes[0]:
                    ax.annotate(label, (at, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                                textcoords="offset points", fontsize=8)
        else:
            draw_bars(ax, order, groups, ss, color, ax is axes[0] and len(ss) > 1)
            color += len(ss)
        ax.set_ylabel(ylabel)
        if all(v.is_integer() for g in groups.values() for f, _ in ss for v in g[f]):
            ax.yaxis.get_major_locator().set_params(integer=True)  # counts: no ticks between
        if args.logy:
            ax.set_yscale("log")
        # A legend of what an earlier panel's does not already name.
        handles = [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in shown]
        shown.update(lab for _, lab in handles)
        if handles and x:
            ax.legend(*zip(*handles), loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=8)
        elif handles:
            # Below the axes: above them it would cover the ratios.
            ax.legend(*zip(*handles), loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(handles),
                      frameon=False)
    if x:
        axes[-1].set_xlabel(x[1])
        at = sorted({k[1] for k in order})
        if len(at) <= 8:  # a few settings (server counts, delays): ticks at them
            axes[-1].set_xticks(at)
            axes[-1].set_xticklabels(["%g" % a for a in at])
    if n == 1:
        axes[0].set_title(args.title)
    else:
        fig.suptitle(args.title)
    fig.tight_layout()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.results)), "e2e.png")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
