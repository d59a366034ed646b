#!/usr/bin/env bash
# Elastic parameter servers (issue 12): what a server change and a server
# failure cost a training job, on this machine, in one run.
#
#   bench/elastic_bench.sh [--mode async|sync] [--parts "add fail"]
#       [--add_at 300] [--add_steps 700] [--fail_steps 500] [--every 100] [--kill_at 250]
#       [--heartbeat_ms 500] [--peer_timeout_ms 1500] [--connection_loss_ms N]
#       [--cache cold|warm] [--timeout_s 900] [--precopy true|false]
#
# The job is W2 of bench/e2e_bench.sh (bench/configs/w2.json: 8 tables of
# 200,000 rows x 64, SGD, 2 trainers, batch 512 bags of 20 Zipf(1.05) ids per
# trainer, MLP 512-256-1), with training.log_every 1 so that every trainer
# logs each step with glog's wall-clock time (microseconds): those lines time
# the steps. Everything runs on 127.0.0.1 through scripts/launch_local.sh.
#
#   add:  the job starts on 1 server with checkpoint.dir set (no periodic
#         checkpoints); once trainer 0 has done --add_at steps,
#         `launch_local.sh --run_dir DIR --add_ps 1` adds a second one, which
#         the master takes in at the next step boundary: the rows it takes
#         over come from the first server (a migration, no checkpoint).
#         Prints examples/s before and after (steady state: the first 50 steps
#         and the 30 after the change are left out, as is the pause), the
#         ratio, the pause (the gap between the trainers' last step on 1 server
#         and their first on 2, less one step) split into the stop, the
#         migration, the swap and the restart, the rows and bytes moved (the
#         plan's count of materialized and not) and the migration's rate, and
#         the CPU each process
#         used in both windows (from /proc/<pid>/stat) with the machine's.
#   fail: the job on 2 servers with a checkpoint every --every steps; once
#         trainer 0 has done --kill_at steps, kill -9 of server ps1. Prints
#         the time from the kill to the first step of the new generation and
#         to being back at the step of the kill, split into detection (kill ->
#         the master's "lost" line, stamped as it is written), restore (the
#         master's "T s to restore"), the trainers' restart, and replay; and
#         the restore's read rate (the rolled-back-to checkpoint's bytes / T)
#         against `cat` of the same files. --cache cold (the default, as root)
#         syncs and drops the page cache once the checkpoint to roll back to
#         is written (before the kill), so the restore reads from the disk,
#         and compares with a cold `cat`; warm leaves the checkpoint in the
#         page cache (it was just written) and compares with a warm `cat`.
#         Both `cat` rates are printed. Dropping the page cache is
#         machine-wide: other jobs on the machine feel it too.
#
# --precopy sets runtime.precopy (default true): the added server copies its
# rows while the job trains, and the boundary moves only those updated since.
# The runtime timeouts are what a user wanting fast detection would set:
# heartbeat_ms 500 (the default) and peer_timeout_ms 1500 (three heartbeats;
# the default is 10000); runtime.connection_loss_ms (a server whose connection
# closed and stayed closed that long is dead) is left at the master's default
# unless --connection_loss_ms is given (the master's default is 1000).
# Outputs: run/elastic/{add,fail}/ (logs, metrics, master.stamped: master.log
# with the time each line was seen, cpu.jsonl, t_add / t_kill),
# run/elastic/results.jsonl, and run/elastic/elastic.png (needs Debian's
# python3-matplotlib; said when missing): trainer 0's time per step against
# the seconds from the add / the kill, one line per part, drawn from
# run/elastic/last_steps.jsonl (this run's steps: part, t_s, step, step_ms).
# Checkpoints are deleted at the end.
# Binaries from $TESSERA_BUILD_DIR or $TESSERA_BIN_DIR; with neither set it
# first builds build/ with scripts/build.sh, as e2e_bench.sh does.
# Bounded by --timeout_s; leaves no process behind.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODE=async
PARTS="add fail"
ADD_AT=300
ADD_STEPS=700
FAIL_STEPS=500
EVERY=100
KILL_AT=250
HEARTBEAT_MS=500
PEER_TIMEOUT_MS=1500
CONNECTION_LOSS_MS=""
CACHE=cold
TIMEOUT_S=900
PRECOPY=true
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) MODE="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --add_at) ADD_AT="$2"; shift 2 ;;
    --add_steps) ADD_STEPS="$2"; shift 2 ;;
    --fail_steps) FAIL_STEPS="$2"; shift 2 ;;
    --every) EVERY="$2"; shift 2 ;;
    --kill_at) KILL_AT="$2"; shift 2 ;;
    --heartbeat_ms) HEARTBEAT_MS="$2"; shift 2 ;;
    --peer_timeout_ms) PEER_TIMEOUT_MS="$2"; shift 2 ;;
    --connection_loss_ms) CONNECTION_LOSS_MS="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --timeout_s) TIMEOUT_S="$2"; shift 2 ;;
    --precopy) PRECOPY="$2"; shift 2 ;;
    *) echo "elastic_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$MODE" in async|sync) ;; *) echo "elastic_bench: --mode async or sync" >&2; exit 2 ;; esac
case "$CACHE" in cold|warm) ;; *) echo "elastic_bench: --cache cold or warm" >&2; exit 2 ;; esac
if [ "$CACHE" = cold ] && ! [ -w /proc/sys/vm/drop_caches ]; then
  echo "elastic_bench: --cache cold needs to write /proc/sys/vm/drop_caches (root); using warm" >&2
  CACHE=warm
fi
if [ "$KILL_AT" -le "$EVERY" ] || [ "$KILL_AT" -ge "$FAIL_STEPS" ] || [ "$ADD_AT" -ge "$((ADD_STEPS - 100))" ]; then
  echo "elastic_bench: need --every < --kill_at < --fail_steps and --add_at <= --add_steps - 100" >&2
  exit 2
fi

if [ -z "${TESSERA_BUILD_DIR:-}" ] && [ -z "${TESSERA_BIN_DIR:-}" ]; then
  "$ROOT/scripts/build.sh" --target tessera_master --target tessera_ps --target tessera_trainer >/dev/null || exit 1
fi
# shellcheck source=../scripts/common.sh disable=SC1091
source "$ROOT/scripts/common.sh"
PS_BIN="$(tessera_bin tessera_ps)" || exit 1
tessera_bin tessera_master >/dev/null || exit 1
tessera_bin tessera_trainer >/dev/null || exit 1
# Absolute, as /proc/<pid>/exe names them (TESSERA_BUILD_DIR may be relative).
BIN_DIRS="$(realpath "$(dirname "$PS_BIN")"):$(realpath "$(dirname "$(tessera_bin tessera_master)")"):$(realpath "$(dirname "$(tessera_bin tessera_trainer)")")"

OUT="$ROOT/run/elastic"
mkdir -p "$OUT"
LAST="$OUT/last_steps.jsonl"  # this run's steps, for its plot
: >"$LAST"
HELPER="$OUT/elastic_helper.py"
START=$SECONDS
DEADLINE=$((SECONDS + TIMEOUT_S))
left() { local l=$((DEADLINE - SECONDS)); [ $l -gt 0 ] && echo $l || echo 1; }

# ---- the helper: follows logs, samples CPU, waits for lines, analyses ----
cat >"$HELPER" <<'PY'
import json, os, re, statistics, sys, time

CLK = os.sysconf("SC_CLK_TCK")
# glog's prefix: I[yyyy]mmdd hh:mm:ss.uuuuuu thread file:line] (the year since glog 0.6)
GLOG = re.compile(r"^[IWEF](\d{4})?(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)\s+\d+ [^\]]*\] (.*)$")


def glog_time(line):
    m = GLOG.match(line)
    if not m:
        return None, None
    year = int(m.group(1)) if m.group(1) else time.localtime().tm_year
    mo, d, h, mi, s, us = (int(m.group(i)) for i in range(2, 8))
    t = time.mktime((year, mo, d, h, mi, s, 0, 0, -1)) + us / 1e6
    return t, m.group(8)


def follow(path, out, stop):
    """Copies path's lines to out, each after the wall-clock time it was seen."""
    pos, buf = 0, b""
    with open(out, "a") as o:
        while True:
            done = os.path.exists(stop)
            try:
                with open(path, "rb") as f:
                    f.seek(pos)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            now = time.time()
            if data:
                pos += len(data)
                buf += data
                *lines, buf = buf.split(b"\n")
                for l in lines:
                    o.write("%.6f %s\n" % (now, l.decode(errors="replace")))
                o.flush()
            if done:
                return
            time.sleep(0.02)


def job_processes(run_dir, bin_dirs):
    """pid -> name (ps0, trainer1, master...): the job's processes, by binary and log."""
    procs = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % p)
            log = os.readlink("/proc/%s/fd/1" % p)
        except OSError:
            continue
        if os.path.dirname(exe) in bin_dirs and os.path.dirname(log) == run_dir and log.endswith(".log"):
            procs[int(p)] = os.path.basename(log)[:-4]
    return procs


def sample(run_dir, bin_dirs, out, stop):
    bin_dirs = bin_dirs.split(":")
    known = {}
    with open(out, "a") as o:
        while not os.path.exists(stop):
            for pid, name in job_processes(run_dir, bin_dirs).items():
                known[pid] = name
            t = time.time()
            cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
            busy = sum(cpu) - cpu[3] - cpu[4]
            procs = {}
            for pid, name in list(known.items()):
                try:
                    st = open("/proc/%d/stat" % pid).read()
                except OSError:
                    del known[pid]
                    continue
                f = st[st.rindex(")") + 2:].split()
                procs["%s/%d" % (name, pid)] = int(f[11]) + int(f[12])
            load = float(open("/proc/loadavg").read().split()[0])
            o.write(json.dumps({"t": t, "busy": busy, "total": sum(cpu), "load1": load, "procs": procs}) + "\n")
            o.flush()
            time.sleep(0.25)


def wait(path, pattern, timeout, pid):
    """Waits for a line matching pattern; prints the time it was seen."""
    rx = re.compile(pattern)
    end = time.time() + float(timeout)
    pos = 0
    while time.time() < end:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        cut = data.rfind(b"\n") + 1
        pos += cut
        for l in data[:cut].decode(errors="replace").splitlines():
            if rx.search(l):
                print("%.6f" % time.time())
                return 0
        if pid and not os.path.exists("/proc/%s" % pid):
            print("job ended before '%s' appeared in %s" % (pattern, path), file=sys.stderr)
            return 1
        time.sleep(0.02)
    print("no '%s' in %s within %s s" % (pattern, path, timeout), file=sys.stderr)
    return 1


def find_pid(run_dir, bin_dirs, name):
    for pid, n in job_processes(run_dir, bin_dirs.split(":")).items():
        if n == name:
            print(pid)
            return 0
    return 1


def step_times(path):
    """[(generation segment, steps done, time)] from a trainer's glog lines."""
    seg, out, marks = 1, [], []
    rx = re.compile(r"trainer \d+ step (\d+) loss")
    for line in open(path, errors="replace"):
        t, msg = glog_time(line)
        if t is None:
            continue
        m = rx.match(msg)
        if m:
            out.append((seg, int(m.group(1)), t))
        elif "ended (" in msg and "joining the next" in msg:
            marks.append((seg, t, msg))
            seg += 1
    return out, marks


def steps(run_dir, part, t_event):
    """Trainer 0's steps as JSON lines: seconds from the event, the time since its previous step."""
    lines, _ = step_times(os.path.join(run_dir, "trainer0.log"))
    for (_, _, before), (_, s, t) in zip(lines, lines[1:]):
        print(json.dumps({"part": part, "t_s": round(t - t_event, 3), "step": s,
                          "step_ms": round(1e3 * (t - before), 1)}))


def stamped(path):
    res = []
    for line in open(path, errors="replace"):
        t, _, msg = line.rstrip("\n").partition(" ")
        res.append((float(t), msg))
    return res


def first(lines, pattern):
    rx = re.compile(pattern)
    for t, msg in lines:
        m = rx.search(msg)
        if m:
            return t, m
    return None, None


def rate(steps, a, b, examples_per_step):
    """Global examples/s between steps a and b (steps done) of one trainer's times."""
    ta, tb = steps.get(a), steps.get(b)
    if ta is None or tb is None or tb <= ta:
        return None
    return examples_per_step * (b - a) / (tb - ta)


def cpu_window(samples, ta, tb, steps=None):
    """Cores each process used between ta and tb, and the machine's busy cores;
    with steps, also the job's CPU ms per step."""
    inside = [s for s in samples if ta <= s["t"] <= tb]  # every process still running
    if len(inside) < 2:
        return None
    sa, sb = inside[0], inside[-1]
    dt = sb["t"] - sa["t"]
    if dt <= 0:
        return None
    by_name = {}
    for k, v in sb["procs"].items():
        if k in sa["procs"]:
            name = k.split("/")[0]
            by_name[name] = by_name.get(name, 0) + (v - sa["procs"][k]) / CLK / dt
    ncpu = os.cpu_count()
    machine = ncpu * (sb["busy"] - sa["busy"]) / max(1, sb["total"] - sa["total"])
    loads = [s["load1"] for s in samples if sa["t"] <= s["t"] <= sb["t"]]
    res = {"seconds": round(dt, 1), "cores_by_process": {k: round(v, 2) for k, v in sorted(by_name.items())},
           "job_cores": round(sum(by_name.values()), 2), "machine_busy_cores": round(machine, 2),
           "cpus": ncpu, "load1": [min(loads), max(loads)] if loads else None}
    if steps:
        res["job_cpu_ms_per_step"] = round(1e3 * sum(by_name.values()) * (tb - ta) / steps, 1)
    return res


def metrics(run_dir):
    gens, per_step = {}, {}
    for r in (0, 1):
        p = os.path.join(run_dir, "trainer%d.jsonl" % r)
        if not os.path.exists(p):
            continue
        for line in open(p):
            j = json.loads(line)
            gens.setdefault(j["generation"], 0)
            gens[j["generation"]] += 1
            per_step.setdefault((j["generation"], j["step"]), []).append(j)
    return gens, per_step


def restored_rows(run_dir):
    """Rows (row slices) each server read from a checkpoint, from its log."""
    n = {}
    rx = re.compile(r"restored (\d+) row slices")
    for f in sorted(os.listdir(run_dir)):
        if re.match(r"ps\d+\.log$", f):
            for line in open(os.path.join(run_dir, f), errors="replace"):
                m = rx.search(line)
                if m:
                    n[f[:-4]] = n.get(f[:-4], 0) + int(m.group(1))
    return n


def servers_ready(run_dir, version, since):
    """Seconds from since until each server held its shards of plan version."""
    out = {}
    rx = re.compile(r"holding \d+ shard\(s\) of job .*, plan version %d," % version)
    for f in sorted(os.listdir(run_dir)):
        if re.match(r"ps\d+\.log$", f):
            for line in open(os.path.join(run_dir, f), errors="replace"):
                t, msg = glog_time(line)
                if t is not None and rx.search(msg):
                    out[f[:-4]] = round(t - since, 3)
    return out


def analyze_add(run_dir, add_at, t_add, examples_per_step, mode):
    lines, marks = step_times(os.path.join(run_dir, "trainer0.log"))
    g1 = {s: t for g, s, t in lines if g == 1}
    g2 = {s: t for g, s, t in lines if g == 2}
    if not g1 or not g2:
        raise SystemExit("add: trainer 0 did not run two generations (see %s)" % run_dir)
    last1, first2 = max(g1), min(g2)
    change = first2 - 1  # the step the new generation starts at (steps done)
    warm, warm_after, end = 50, 30, max(g2)
    before = rate(g1, warm, min(add_at, last1), examples_per_step)
    after = rate(g2, change + warm_after, end, examples_per_step)
    step_after = statistics.median(g2[s + 1] - g2[s] for s in range(change + warm_after, end))
    step_before = statistics.median(g1[s + 1] - g1[s] for s in range(warm, min(add_at, last1)))
    gap = g2[first2] - g1[last1]
    pause = gap - step_after
    m = stamped(os.path.join(run_dir, "master.stamped"))
    _, plan = first(m, r"plan version (\d+) on (\d+) server\(s\): (\d+) of (\d+) row elements \((\d+)%, (\d+) MB")
    t_plan, _ = first(m, r"plan version 2 on")
    t_mig, mig = first(m, r"migration at step (\d+): (\d+) rows \(([\d.e+-]+) MB\) went to their new servers "
                          r"in ([\d.e+-]+) s")
    _, pre = first(m, r"the rows updated since the precopy, which copied (\d+) rows \(([\d.e+-]+) MB\)")
    # With a precopy the plan comes before the boundary (the copy runs while
    # the job trains): the pause's parts start at the trainers' stop.
    t_start = max(t_plan, g1[last1]) if t_plan else None
    moved_elements = int(plan.group(3)) if plan else None
    moved_mb = int(plan.group(6)) if plan else None
    dim = 64
    t_gen = None
    for line in open(os.path.join(run_dir, "master.log"), errors="replace"):
        t, msg = glog_time(line)
        if t is not None and re.match(r"generation 2: ", msg):
            t_gen = t
    samples = [json.loads(l) for l in open(os.path.join(run_dir, "cpu.jsonl"))]
    gens, per_step = metrics(run_dir)

    def phases(gen, a, b):  # median ms of each part of a step, both trainers
        out = {}
        for k in ("step_ms", "lookup_ms", "dense_ms", "allreduce_ms", "push_ms"):
            v = [j[k] for s in range(a, b) for j in per_step.get((gen, s), [])]
            out[k] = round(statistics.median(v), 1) if v else None
        return out

    res = {
        "part": "add", "mode": mode, "add_triggered_after_step": add_at, "change_at_step": change,
        "trigger_to_change_s": round(g1[last1] - t_add, 2),
        "examples_per_s_before": round(before), "examples_per_s_after": round(after),
        "ratio": round(after / before, 2),
        "window_before_steps": [warm, min(add_at, last1)], "window_after_steps": [change + warm_after, end],
        "step_ms_before": round(step_before * 1e3, 1), "step_ms_after": round(step_after * 1e3, 1),
        "trainer_phases_ms_before": phases(1, warm, min(add_at, last1)),
        "trainer_phases_ms_after": phases(2, change + warm_after, end),
        "gap_s": round(gap, 3), "pause_s": round(pause, 3),
        "pause_split_s": {"stop_and_plan": round(t_start - g1[last1], 3) if t_start else None,
                          "migration": round(t_mig - t_start, 3) if t_mig and t_start else None,
                          "swap": round(t_gen - t_mig, 3) if t_gen and t_mig else None,
                          "trainers_restart_and_first_step": round(g2[first2] - t_gen, 3) if t_gen else None},
        "precopy_rows": int(pre.group(1)) if pre else None,
        "precopy_MB": float(pre.group(2)) if pre else None,
        "precopy_started_s_before_the_stop": round(g1[last1] - t_plan, 3) if pre and t_plan else None,
        "migration_rows": int(mig.group(2)) if mig else None,
        "migration_MB": float(mig.group(3)) if mig else None,
        "migration_s": float(mig.group(4)) if mig else None,
        "migration_MB_per_s": round(float(mig.group(3)) / float(mig.group(4)), 1) if mig and float(mig.group(4)) > 0
        else None,
        "servers_ready_s_after_plan": servers_ready(run_dir, 2, t_plan) if t_plan else None,
        "moved_row_elements": moved_elements, "moved_of": int(plan.group(4)) if plan else None,
        "moved_percent": int(plan.group(5)) if plan else None,
        "moved_rows": moved_elements // dim if moved_elements is not None else None,
        "moved_MB": moved_mb,
        "moved_rows_per_s_of_pause": round(moved_elements / dim / pause) if plan and pause > 0 else None,
        "moved_MB_per_s_of_pause": round(moved_mb / pause, 1) if plan and pause > 0 else None,
        "rows_restored_by_servers": restored_rows(run_dir),
        "metrics_lines_by_generation": gens,
        "cpu_before": cpu_window(samples, g1[warm], g1[min(add_at, last1)], min(add_at, last1) - warm),
        "cpu_after": cpu_window(samples, g2[change + warm_after], g2[end], end - change - warm_after),
        "cpu_pause": cpu_window(samples, g1[last1], g2[first2]),
    }
    return res


def analyze_fail(run_dir, t_kill, examples_per_step, mode, ckpt_bytes):
    lines, marks = step_times(os.path.join(run_dir, "trainer0.log"))
    segs = sorted({g for g, _, _ in lines})
    if len(segs) < 2:
        raise SystemExit("fail: trainer 0 did not start a second generation (see %s)" % run_dir)
    g1 = {s: t for g, s, t in lines if g == segs[0]}
    g2 = {s: t for g, s, t in lines if g == segs[1]}
    kill_step = max(s for s, t in g1.items() if t <= t_kill)
    last1 = max(g1)
    m = stamped(os.path.join(run_dir, "master.stamped"))
    t_lost, lost = first(m, r"\[master\] lost (.*); recovering")
    t_roll, roll = first(m, r"rolling back to step (\d+)")
    t_rec, rec = first(m, r"recovered: generation (\d+) from step (\d+) \(([\d.e+-]+) s to restore\)")
    first2 = min(g2)
    back = min((s for s in g2 if s >= kill_step), default=None)
    restore_s = float(rec.group(3))
    step_s = statistics.median(g2[s + 1] - g2[s] for s in sorted(g2)[:-1])
    gens, per_step = metrics(run_dir)
    samples = [json.loads(l) for l in open(os.path.join(run_dir, "cpu.jsonl"))]
    res = {
        "part": "fail", "mode": mode, "killed_after_step": kill_step, "steps_done_by_trainer0_after_kill": last1 - kill_step,
        "rolled_back_to_step": int(roll.group(1)), "new_generation": int(rec.group(1)),
        "detection_s": round(t_lost - t_kill, 3),
        "master_lost_line": lost.group(1),
        "restore_s": round(restore_s, 3),
        "servers_ready_s_after_rolling_back_line": servers_ready(run_dir, int(rec.group(1)), t_roll),
        "lost_to_rolling_back_line_s": round(t_roll - t_lost, 3),
        "recovered_to_first_step_s": round(g2[first2] - t_rec, 3),
        "kill_to_first_new_step_s": round(g2[first2] - t_kill, 3),
        "replay_steps": kill_step - (first2 - 1),
        "replay_s": round(g2[back] - g2[first2], 3) if back else None,
        "kill_to_back_at_kill_step_s": round(g2[back] - t_kill, 3) if back else None,
        "step_ms_new_generation": round(step_s * 1e3, 1),
        "metrics_lines_by_generation": gens,
        "checkpoint_bytes_read": ckpt_bytes,
        "restore_MB_per_s": round(ckpt_bytes / restore_s / 1e6, 1) if restore_s > 0 else None,
        "rows_restored_by_servers": restored_rows(run_dir),
        "cpu_restore": cpu_window(samples, t_roll, t_rec),
    }
    return res


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "follow":
        follow(*args)
    elif cmd == "sample":
        sample(*args)
    elif cmd == "wait":
        sys.exit(wait(*args))
    elif cmd == "find_pid":
        sys.exit(find_pid(*args))
    elif cmd == "steps":
        steps(args[0], args[1], float(args[2]))
    elif cmd == "analyze_add":
        print(json.dumps(analyze_add(args[0], int(args[1]), float(args[2]), int(args[3]), args[4])))
    elif cmd == "analyze_fail":
        print(json.dumps(analyze_fail(args[0], float(args[1]), int(args[2]), args[3], int(args[4]))))
    elif cmd == "config":
        src, dst, ps, steps, mode, ckpt, every, keep, hb, timeout, loss, precopy = args
        c = json.load(open(src))
        c["cluster"]["num_ps"] = int(ps)
        c["training"].update(steps=int(steps), consistency=mode, log_every=1)
        c["checkpoint"] = {"dir": ckpt, "every_steps": int(every), "keep": int(keep)}
        c["runtime"] = {"heartbeat_ms": int(hb), "peer_timeout_ms": int(timeout), "precopy": precopy == "true"}
        if loss:
            c["runtime"]["connection_loss_ms"] = int(loss)
        json.dump(c, open(dst, "w"), indent=2)
    else:
        sys.exit("unknown helper command " + cmd)
PY

# ---- processes this script starts, stopped on any exit ----
LAUNCH_PID=""
BG_PIDS=()
STOP_FILE=""
cleanup() {
  [ -n "$STOP_FILE" ] && touch "$STOP_FILE"
  if [ -n "$LAUNCH_PID" ] && kill -0 "$LAUNCH_PID" 2>/dev/null; then
    kill -TERM "$LAUNCH_PID" 2>/dev/null  # launch_local stops its job, added servers included
    for _ in $(seq 1 50); do kill -0 "$LAUNCH_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$LAUNCH_PID" 2>/dev/null
  fi
  for pid in "${BG_PIDS[@]}"; do
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  LAUNCH_PID=""; BG_PIDS=(); STOP_FILE=""
}
trap cleanup EXIT
trap 'echo "elastic_bench: interrupted" >&2; exit 130' INT TERM

# Starts a job in background: $1 part name, $2 servers, $3 config. Followers of
# master.log (stamped) and a CPU sampler come with it.
start_job() {
  local dir="$OUT/$1"
  mkdir -p "$dir"
  # Old logs would be read as this run's (launch_local removes them too, but
  # after the followers start).
  rm -f "$dir"/*.log "$dir"/*.jsonl "$dir"/*.stamped "$dir"/*.out "$dir"/*.pids "$dir"/stop "$dir"/t_add "$dir"/t_kill \
    "$dir"/master.endpoint "$dir"/master.pid "$dir"/summary.json
  STOP_FILE="$dir/stop"
  "$ROOT/scripts/launch_local.sh" --ps "$2" --trainers 2 --config "$3" --run_dir "$dir" \
    --timeout_s "$(left)" >"$dir/launch.out" 2>&1 &
  LAUNCH_PID=$!
  python3 "$HELPER" follow "$dir/master.log" "$dir/master.stamped" "$STOP_FILE" &
  BG_PIDS+=("$!")
  python3 "$HELPER" sample "$dir" "$BIN_DIRS" "$dir/cpu.jsonl" "$STOP_FILE" &
  BG_PIDS+=("$!")
}

# Waits for the job started last to end; its exit code.
end_job() {
  local code=0
  while kill -0 "$LAUNCH_PID" 2>/dev/null; do
    if [ $SECONDS -ge $DEADLINE ]; then
      echo "elastic_bench: over --timeout_s $TIMEOUT_S; stopping the job" >&2
      cleanup
      return 124
    fi
    sleep 0.5
  done
  wait "$LAUNCH_PID"; code=$?
  LAUNCH_PID=""
  touch "$STOP_FILE"
  for pid in "${BG_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  BG_PIDS=(); STOP_FILE=""
  return $code
}

cfg() {  # part servers steps every keep -> config path
  local dir="$OUT/$1"
  mkdir -p "$dir"
  rm -rf "$dir/ckpt"
  python3 "$HELPER" config "$ROOT/bench/configs/w2.json" "$dir/job.json" "$2" "$3" "$MODE" "$dir/ckpt" "$4" "$5" \
    "$HEARTBEAT_MS" "$PEER_TIMEOUT_MS" "$CONNECTION_LOSS_MS" "$PRECOPY"
  echo "$dir/job.json"
}

EXAMPLES_PER_STEP=$((2 * 512))
echo "elastic_bench: mode $MODE, precopy $PRECOPY, heartbeat_ms $HEARTBEAT_MS, peer_timeout_ms $PEER_TIMEOUT_MS," \
  "connection_loss_ms ${CONNECTION_LOSS_MS:-default}," \
  "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
FAILED=0

if [[ " $PARTS " == *" add "* ]]; then
  dir="$OUT/add"
  config="$(cfg add 1 "$ADD_STEPS" 0 2)"
  echo "== add: W2 on 1 server, a second added after step $ADD_AT of $ADD_STEPS"
  start_job add 1 "$config"
  if python3 "$HELPER" wait "$dir/trainer0.log" "trainer 0 step $ADD_AT loss" "$(left)" "$LAUNCH_PID" >/dev/null; then
    T_ADD=$EPOCHREALTIME
    echo "$T_ADD" >"$dir/t_add"
    "$ROOT/scripts/launch_local.sh" --run_dir "$dir" --add_ps 1 >"$dir/add_ps.out" 2>&1 || {
      echo "elastic_bench: --add_ps failed:" >&2; cat "$dir/add_ps.out" >&2; FAILED=1; }
    end_job || { echo "elastic_bench: the add job failed; see $dir/launch.out" >&2; tail -n 5 "$dir/launch.out" >&2; FAILED=1; }
    du -sb "$dir/ckpt" 2>/dev/null | awk '{printf "checkpoint folder after the add: %.1f MB\n", $1/1e6}'
    if [ $FAILED -eq 0 ] && res=$(python3 "$HELPER" analyze_add "$dir" "$ADD_AT" "$T_ADD" "$EXAMPLES_PER_STEP" "$MODE"); then
      echo "{\"date\": \"$(date -I)\", \"result\": $res}" >>"$OUT/results.jsonl"
      python3 "$HELPER" steps "$dir" add "$T_ADD" >>"$LAST"
      python3 -c 'import json,sys; [print("  %s: %s" % kv) for kv in json.loads(sys.argv[1]).items()]' "$res"
    else
      FAILED=1
    fi
  else
    FAILED=1
  fi
  cleanup
  rm -rf "$dir/ckpt"
fi

if [[ " $PARTS " == *" fail "* ]] && [ $FAILED -eq 0 ]; then
  dir="$OUT/fail"
  config="$(cfg fail 2 "$FAIL_STEPS" "$EVERY" 100)"
  echo "== fail: W2 on 2 servers, a checkpoint every $EVERY steps, kill -9 of ps1 after step $KILL_AT of $FAIL_STEPS (page cache $CACHE)"
  start_job fail 2 "$config"
  # The checkpoint the job will roll back to; once it is written (and, for a
  # cold restore, on the disk and out of the page cache), kill at --kill_at.
  C=$((KILL_AT / EVERY * EVERY))
  if python3 "$HELPER" wait "$dir/master.log" "checkpoint at step $C complete" "$(left)" "$LAUNCH_PID" >/dev/null &&
     PS1_PID=$(python3 "$HELPER" find_pid "$dir" "$BIN_DIRS" ps1) &&
     { [ "$CACHE" = warm ] || { sync && echo 3 >/proc/sys/vm/drop_caches; }; } &&
     python3 "$HELPER" wait "$dir/trainer0.log" "trainer 0 step $KILL_AT loss" "$(left)" "$LAUNCH_PID" >/dev/null; then
    T_KILL=$EPOCHREALTIME
    kill -KILL "$PS1_PID"
    echo "$T_KILL" >"$dir/t_kill"
    # launch_local reports the killed server (code 137) and exits 1 for it;
    # anything else it reports is a failure of the job.
    if ! end_job && { [ ! -s "$dir/summary.json" ] ||
         grep "^launch_local:" "$dir/launch.out" | grep -vq "ps1 exited with code 137"; }; then
      echo "elastic_bench: the fail job failed; see $dir/launch.out" >&2
      tail -n 5 "$dir/launch.out" >&2
      FAILED=1
    fi
    # The checkpoint rolled back to: its files are what the survivor read.
    step=$(sed -n 's/.*rolling back to step \([0-9]*\).*/\1/p' "$dir/master.stamped" | head -n 1)
    ck="$dir/ckpt/$(printf 'ckpt-%012d' "${step:-0}")"
    if [ $FAILED -eq 0 ] && [ -d "$ck" ]; then
      mapfile -t files < <(find "$ck" -type f | sort)
      bytes=$(stat -c %s "${files[@]}" | awk '{s += $1} END {print s}')
      sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
      t0=$EPOCHREALTIME; cat "${files[@]}" >/dev/null; t1=$EPOCHREALTIME
      cat "${files[@]}" >/dev/null; t2=$EPOCHREALTIME
      cold=$(python3 -c "print(round($bytes / ($t1 - $t0) / 1e6, 1))")
      warm=$(python3 -c "print(round($bytes / ($t2 - $t1) / 1e6, 1))")
      if res=$(python3 "$HELPER" analyze_fail "$dir" "$T_KILL" "$EXAMPLES_PER_STEP" "$MODE" "$bytes"); then
        res=$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); cold, warm, cache = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r.update(checkpoint_files=int(sys.argv[5]), page_cache_at_restore=cache, cat_cold_MB_per_s=cold, cat_warm_MB_per_s=warm,
         restore_vs_cat=round(r["restore_MB_per_s"] / (cold if cache == "cold" else warm), 2))
print(json.dumps(r))' "$res" "$cold" "$warm" "$CACHE" "${#files[@]}")
        echo "{\"date\": \"$(date -I)\", \"heartbeat_ms\": $HEARTBEAT_MS, \"peer_timeout_ms\": $PEER_TIMEOUT_MS, \"connection_loss_ms\": \"${CONNECTION_LOSS_MS:-default}\", \"result\": $res}" >>"$OUT/results.jsonl"
        python3 "$HELPER" steps "$dir" fail "$T_KILL" >>"$LAST"
        python3 -c 'import json,sys; [print("  %s: %s" % kv) for kv in json.loads(sys.argv[1]).items()]' "$res"
      else
        FAILED=1
      fi
    else
      echo "elastic_bench: no checkpoint folder $ck to compare the restore with" >&2
      FAILED=1
    fi
  else
    FAILED=1
  fi
  cleanup
  rm -rf "$dir/ckpt"
fi
# The picture (Debian's python3-matplotlib; said when missing): trainer 0's
# time per step around the add and the kill.
if [ ! -s "$LAST" ]; then
  echo "elastic_bench: no steps to draw"
elif /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$ROOT/scripts/plot_bench.py" "$LAST" --out "$OUT/elastic.png" --x "t_s=seconds from the add / the kill" \
    --by part --ylabel "ms since the step before" --series "step_ms=step time" --mark "0=add / kill -9" --stairs --logy \
    --title "W2 ($MODE, precopy $PRECOPY): trainer 0's steps around a server added (add) and killed (fail)"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
echo "elastic_bench: replicas (\"replicas\": 2) are measured by bench/replica_bench.sh"
echo "elastic_bench: done in $((SECONDS - START)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $FAILED
