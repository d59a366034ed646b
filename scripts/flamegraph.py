#!/usr/bin/python3
"""Draws a flame graph PNG from `perf script` output (issue 15: where a
server's CPU goes). Debian has no flame-graph tool, so this folds the stacks
and draws them with matplotlib (Debian's python3-matplotlib), as
scripts/plot_run.py draws runs.

    perf record -F 499 -g -p PID -o perf.data -- sleep 20
    perf script -i perf.data > perf.txt
    scripts/flamegraph.py perf.txt --out flame.png [--folded flame.folded]
        [--title T] [--min_percent 0.5] [--comm NAME ...]

Each box is a function; its width is the share of samples whose stack
passes through it, its children sit on top of it; the root is the thread's
name (perf's comm). Widths are sample counts, not time: with a fixed
frequency (-F) they are proportional to CPU time. Frames narrower than
--min_percent of all samples are left out (their width stays in the parent).
--folded also writes the folded stacks ("root;caller;callee COUNT" lines,
the format other flame-graph tools read). Input that is not perf script's
text stops with the line number and what was wrong.
"""

import argparse
import collections
import hashlib
import re
import sys

# The header of one sample: "comm  pid[/tid] [cpu] time: [period] event:".
HEADER = re.compile(r"^(?P<comm>\S.*?)\s+\d+(?:/\d+)?\s+(?:\[\d+\]\s+)?\d+\.\d+:\s+(?:\d+\s+)?\S+:")
# One frame below it: "\t address symbol+offset (dso)".
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")


def short_symbol(sym, dso):
    """The function's name without its offset and arguments; unknown
    symbols named by their library."""
    if sym in ("[unknown]", ""):
        return "[%s]" % dso.rsplit("/", 1)[-1]
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    # Arguments and templates make C++ names unreadably long in a box.
    depth, out = 0, []
    for ch in sym:
        if ch in "(<":
            depth += 1
            if depth == 1:
                out.append("()" if ch == "(" else "<>")
            continue
        if ch in ")>":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out).strip() or sym


def fold(lines, comms=None):
    """{(root, caller, ..., leaf): samples} from perf script's lines."""
    stacks = collections.Counter()
    comm, frames = None, []

    def flush():
        if comm is not None and (not comms or comm in comms):
            stacks[tuple([comm] + list(reversed(frames)))] += 1

    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if line.startswith("#"):
            continue
        if not line[0].isspace():
            flush()
            m = HEADER.match(line)
            if not m:
                raise ValueError("line %d: not a perf script sample header: %r" % (lineno, line[:120]))
            comm, frames = m.group("comm").strip(), []
            continue
        m = FRAME.match(line)
        if not m or comm is None:
            raise ValueError("line %d: not a stack frame of a sample: %r" % (lineno, line[:120]))
        frames.append(short_symbol(m.group("sym"), m.group("dso")))
    flush()
    return stacks


class Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name):
        self.name, self.count, self.children = name, 0, {}


def build_tree(stacks):
    root = Node("all")
    for stack, n in stacks.items():
        node = root
        node.count += n
        for name in stack:
            node = node.children.setdefault(name, Node(name))
            node.count += n
    return root


def color(name):
    # A stable warm colour per function, so one function looks the same everywhere.
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
    return (0.85 + 0.15 * ((h & 0xFF) / 255), 0.35 + 0.45 * (((h >> 8) & 0xFF) / 255),
            0.1 + 0.2 * (((h >> 16) & 0xFF) / 255))


def draw(root, out, title, min_fraction):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    boxes = []  # (x, width, depth, node)

    def lay(node, x, depth):
        boxes.append((x, node.count, depth, node))
        for child in sorted(node.children.values(), key=lambda c: c.name):
            if child.count / root.count >= min_fraction:
                lay(child, x, depth + 1)
            x += child.count

    lay(root, 0, 0)
    depth = max(d for _, _, d, _ in boxes) + 1
    fig_w = 16
    fig, ax = plt.subplots(figsize=(fig_w, max(3, 0.28 * depth + 1)))
    chars_per_unit = fig_w * 100 / 7.0 / root.count  # about 7 px a character at 100 dpi
    for x, w, d, node in boxes:
        ax.add_patch(plt.Rectangle((x, d), w, 0.95, facecolor=color(node.name) if d else (0.8, 0.8, 0.8),
                                   edgecolor="white", linewidth=0.3))
        fits = int(w * chars_per_unit) - 1
        if fits >= 4:
            label = "%s (%.1f%%)" % (node.name, 100.0 * node.count / root.count)
            if len(label) > fits:
                label = label[:fits - 2] + ".."
            ax.text(x + w / 2, d + 0.47, label, ha="center", va="center", fontsize=6.5, clip_on=True)
    ax.set_xlim(0, root.count)
    ax.set_ylim(0, depth)
    ax.set_yticks([])
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("%d samples; width: share of samples; boxes under %.1f%% left out" %
                  (root.count, 100 * min_fraction))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("perf_script", help="perf script's output ('-': standard input)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--folded", help="also write the folded stacks here")
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--min_percent", type=float, default=0.5)
    ap.add_argument("--comm", nargs="*", help="only these threads (perf's comm)")
    args = ap.parse_args()
    src = sys.stdin if args.perf_script == "-" else open(args.perf_script, errors="replace")
    try:
        stacks = fold(src, set(args.comm) if args.comm else None)
    except ValueError as e:
        sys.exit("flamegraph.py: %s: %s" % (args.perf_script, e))
    if not stacks:
        sys.exit("flamegraph.py: %s holds no samples%s" %
                 (args.perf_script, " of " + ", ".join(args.comm) if args.comm else ""))
    if args.folded:
        with open(args.folded, "w") as f:
            for stack, n in sorted(stacks.items()):
                f.write("%s %d\n" % (";".join(stack), n))
    draw(build_tree(stacks), args.out, args.title, args.min_percent / 100.0)
    print("%s: %d samples, %d stacks" % (args.out, sum(stacks.values()), len(stacks)))


if __name__ == "__main__":
    main()
