#!/usr/bin/python3
"""Pictures of one or more Tessera runs, from their run folders.

    scripts/plot_run.py RUN_DIR [RUN_DIR ...] [--out DIR] [--smooth N]

A run folder is what scripts/launch_local.sh writes (--run_dir): the
trainers' per-step metrics trainer<r>.jsonl and the master's summary.json.
Writes into --out (default: the first run folder):

  loss.png          training loss over steps (trainer 0's; a moving average
                    over --smooth steps drawn over the raw curve), with the
                    final evaluation's AUC and log loss in the legend, and
                    the held-out AUC over steps on a second axis when the
                    job evaluated while it trained (training.eval_every)
  examples_per_s.png  examples/s of all trainers together over steps
                    (moving average), and the job's overall figure
  step_time.png     where a step's time goes, stacked: data, lookup, dense,
                    allreduce, push, and the rest; one panel per run

Several runs are drawn side by side (same axes, one colour each), labelled
by their folder names. Needs python3-matplotlib (Debian's, hence
/usr/bin/python3).
"""
import argparse
import json
import os
import sys

PARTS = ["data_ms", "lookup_ms", "dense_ms", "allreduce_ms", "push_ms"]


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise SystemExit("%s:%d: not JSON (%s)" % (path, number, e))
    return rows


class Run:
    def __init__(self, folder):
        self.folder = folder
        self.label = os.path.basename(os.path.normpath(folder))
        self.trainers = {}
        if not os.path.isdir(folder):
            raise SystemExit("%s: no such run folder" % folder)
        for name in sorted(os.listdir(folder)):
            if name.startswith("trainer") and name.endswith(".jsonl"):
                rank = name[len("trainer"):-len(".jsonl")]
                if rank.isdigit():
                    self.trainers[int(rank)] = read_jsonl(os.path.join(folder, name))
        if not self.trainers or not any(self.trainers.values()):
            raise SystemExit("%s: no trainer<r>.jsonl with metrics (is it a run folder?)" % folder)
        summary = os.path.join(folder, "summary.json")
        self.summary = json.load(open(summary)) if os.path.exists(summary) else {}

    def first_trainer(self):
        return self.trainers[min(self.trainers)]

    def examples_per_s(self):
        """Steps and examples/s of all trainers together (sum over ranks)."""
        by_step = {}
        for rows in self.trainers.values():
            for r in rows:
                if "examples_per_s" in r:
                    by_step[r["step"]] = by_step.get(r["step"], 0.0) + r["examples_per_s"]
        steps = sorted(by_step)
        return steps, [by_step[s] for s in steps]


def moving_average(values, n):
    if n <= 1 or len(values) < 2:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out


def evaluations(run):
    """(steps trained, AUC) of every evaluation: those written while the job
    trained ({"step", "eval"} lines) and the final one of the summary."""
    points = [(r["step"] + 1, r["eval"]["auc"]) for r in run.first_trainer()
              if isinstance(r.get("eval"), dict) and "auc" in r["eval"]]
    final = run.summary.get("eval")
    if points and isinstance(final, dict) and "auc" in final:
        last = max(r["step"] for r in run.first_trainer() if "loss" in r) + 1
        points.append((last, final["auc"]))
    return points


def plot_loss(runs, out, smooth, plt):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    auc_axis = None
    for k, run in enumerate(runs):
        rows = [r for r in run.first_trainer() if "loss" in r]
        steps = [r["step"] for r in rows]
        loss = [r["loss"] for r in rows]
        colour = "C%d" % k
        label = run.label
        ev = run.summary.get("eval")
        if isinstance(ev, dict) and "auc" in ev:
            label += " (eval AUC %.4f, log loss %.4f)" % (ev["auc"], ev.get("log_loss", float("nan")))
        ax.plot(steps, loss, color=colour, alpha=0.25, linewidth=0.8)
        ax.plot(steps, moving_average(loss, smooth), color=colour, label=label)
        points = evaluations(run)
        if points:
            if auc_axis is None:
                auc_axis = ax.twinx()
                auc_axis.set_ylabel("held-out AUC (dashed)")
            auc_axis.plot([p[0] for p in points], [p[1] for p in points], color=colour, linestyle="--",
                          marker="o", markersize=3, label=run.label + " eval AUC")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (trainer 0)")
    ax.set_title("Loss and evaluation" if auc_axis is not None else "Loss")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if auc_axis is not None:
        more_handles, more_labels = auc_axis.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    ax.legend(handles, labels)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"), dpi=110)
    plt.close(fig)


def plot_throughput(runs, out, smooth, plt):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, run in enumerate(runs):
        steps, rate = run.examples_per_s()
        label = run.label
        overall = run.summary.get("examples_per_s")
        if isinstance(overall, (int, float)):
            label += " (%.0f examples/s over the job)" % overall
        ax.plot(steps, moving_average(rate, smooth), color="C%d" % k, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("examples/s, all trainers")
    ax.set_title("Throughput")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "examples_per_s.png"), dpi=110)
    plt.close(fig)


def plot_step_time(runs, out, smooth, plt):
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.5), squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs):
        rows = [r for r in run.first_trainer() if "step_ms" in r]
        steps = [r["step"] for r in rows]
        layers = []
        for part in PARTS:
            layers.append(moving_average([r.get(part, 0.0) for r in rows], smooth))
        rest = [max(0.0, r["step_ms"] - sum(r.get(p, 0.0) for p in PARTS)) for r in rows]
        layers.append(moving_average(rest, smooth))
        labels = [p[:-3] for p in PARTS] + ["other"]
        ax.stackplot(steps, layers, labels=labels, alpha=0.85)
        ax.set_xlabel("step")
        ax.set_title("Step time: %s (trainer 0)" % run.label)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ms per step")
    axes[0][-1].legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "step_time.png"), dpi=110)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", help="where the PNGs go (default: the first run folder)")
    parser.add_argument("--smooth", type=int, default=20, help="steps in the moving average (default 20)")
    args = parser.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_run.py needs matplotlib: apt-get install python3-matplotlib")
    runs = [Run(folder) for folder in args.runs]
    out = args.out or args.runs[0]
    os.makedirs(out, exist_ok=True)
    plot_loss(runs, out, args.smooth, plt)
    plot_throughput(runs, out, args.smooth, plt)
    plot_step_time(runs, out, args.smooth, plt)
    for name in ("loss.png", "examples_per_s.png", "step_time.png"):
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
