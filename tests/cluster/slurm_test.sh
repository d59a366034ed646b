#!/usr/bin/env bash
# A real SLURM cluster on this machine (issue 14): slurmctld and five slurmd,
# each slurmd on a test host of its own (tests/cluster/test_hosts.sh: network
# namespaces with their own addresses) under its own node name, munge for
# authentication. Submits scripts/slurm/tessera.sbatch for the REFERENCE
# Criteo job (1 master, 2 servers, 2 trainers on 5 nodes, one role each)
# and, while it runs, scripts/slurm/tessera_add_ps.sbatch for a third
# server. Checks: both jobs end with code 0; the servers advertised their
# nodes' addresses; the master took the added server in (generation 2 on 3
# servers); and the job's parameters and losses equal the same job run on
# one host's loopback without SLURM (<= 1e-5).
#
#   tests/cluster/slurm_test.sh
#
# Needs root (namespaces, daemons) and Debian's slurm-wlm and munge
# (scripts/test.sh installs them when it runs as root); exits 77 (skipped)
# otherwise. Everything it starts runs from a temp folder (its own
# slurm.conf, munge key and socket, state and logs): the machine's SLURM or
# munge setup, if any, is not touched. Kills every daemon and process it
# started (by pid) and removes the namespaces on exit. KEEP_TMP=1 keeps the
# logs. About a minute.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$ROOT/build}"
# shellcheck source=test_hosts.sh
source "$ROOT/tests/cluster/test_hosts.sh"
[ "$(id -u)" = 0 ] || skip "a SLURM cluster on test hosts needs root"
for tool in slurmctld slurmd sbatch srun scontrol sinfo munged ip; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (apt-get install slurm-wlm munge iproute2)"
done
require_binaries

ID="$(printf '%04x' $(($$ % 65536)))"
PFX="tss$ID"
HOSTS=(m p0 p1 p2 t0 t1)  # nodes n-m ... ; 10.77.0.1 to .6
TMP="$(mktemp -d "${TMPDIR:-/tmp}/slurm_test.XXXXXX")"
chmod 0755 "$TMP"
PIDS=()
FAILURES=0

cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # Job steps' processes (slurmstepd and its tasks) live in the namespaces.
  for ns in "${NAMESPACES[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  remove_hosts
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }

make_hosts_and_reference

# munge: its own key, socket and files (it refuses to run as root without --force).
mkdir -p "$TMP/munge" && chmod 0700 "$TMP/munge"
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 status=none && chmod 0400 "$TMP/munge/munge.key"
munged --force --foreground --key-file="$TMP/munge/munge.key" --socket="$TMP/munge/munge.sock" \
  --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/munge/munged.log" --seed-file="$TMP/munge/seed" \
  >"$TMP/munge/out.log" 2>&1 &
PIDS+=($!)
wait_for "$TMP/munge/munged.log" "Starting" 10 || sleep 1

# slurm.conf: the controller on host m, a node per host, ports of the
# test hosts' own (each namespace has its own port space).
export SLURM_CONF="$TMP/slurm.conf"
mkdir -p "$TMP/state" "$TMP/spool"
{
  echo "ClusterName=tessera-test"
  # The controller's name must be this machine's (slurmctld checks); its
  # address is host m's.
  echo "SlurmctldHost=$(hostname -s)(${ADDR[m]})"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "SlurmctldPort=6817"
  echo "SlurmdPort=6818"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$TMP/munge/munge.sock"
  echo "StateSaveLocation=$TMP/state"
  echo "SlurmdSpoolDir=$TMP/spool/%n"
  echo "SlurmctldPidFile=$TMP/slurmctld.pid"
  echo "SlurmdPidFile=$TMP/slurmd-%n.pid"
  echo "SlurmctldLogFile=$TMP/slurmctld.log"
  echo "SlurmdLogFile=$TMP/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "SchedulerType=sched/builtin"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "MpiDefault=none"
  echo "ReturnToService=2"
  echo "SlurmdParameters=config_overrides"
  echo "InactiveLimit=0"
  echo "KillWait=5"
  for h in "${HOSTS[@]}"; do echo "NodeName=n-$h NodeAddr=${ADDR[$h]} CPUs=2 State=UNKNOWN"; done
  echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
} >"$SLURM_CONF"
for h in "${HOSTS[@]}"; do mkdir -p "$TMP/spool/n-$h"; done

ip netns exec "$PFX-m" slurmctld -D -i -f "$SLURM_CONF" >"$TMP/slurmctld.out" 2>&1 &
PIDS+=($!)
# `ip netns exec` gives each host a fresh /sys, without the cgroup
# hierarchies slurmd insists on initializing (it uses none of them here:
# proctrack/linuxproc, task/none); mount cgroup v1 ones there, in the
# command's own mount namespace, invisible to the rest of the machine.
SLURMD_CGROUPS='mount -t tmpfs cgroup_root /sys/fs/cgroup &&
  for c in freezer cpuset memory devices; do
    mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1
  done && mkdir -p /sys/fs/cgroup/systemd &&
  mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd && exec "$@"'
for h in "${HOSTS[@]}"; do
  ip netns exec "$PFX-$h" sh -c "$SLURMD_CGROUPS" slurmd slurmd -D -N "n-$h" -f "$SLURM_CONF" \
    >"$TMP/slurmd-n-$h.out" 2>&1 &
  PIDS+=($!)
done
# Jobs are submitted from elsewhere than the checkout (CTest runs in the
# build folder): --chdir tells the scripts where it is.
in_m() { ip netns exec "$PFX-m" env SLURM_CONF="$SLURM_CONF" "$@"; }
deadline=$((SECONDS + 60))
until [ "$(in_m sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge ${#HOSTS[@]} ]; do
  if [ $SECONDS -ge $deadline ]; then
    echo "FAIL: the SLURM cluster did not come up:"; in_m sinfo -N 2>&1 | head
    tail -n 5 "$TMP/slurmctld.log" "$TMP"/slurmd-*.log 2>/dev/null
    exit 1
  fi
  sleep 0.5
done
echo "PASS: SLURM cluster up: $(in_m sinfo -h -N -o '%N' | sort -u | tr '\n' ' ')"

# The job: the REFERENCE Criteo job, longer (80 epochs, some 4,500 steps) so that a server can
# join while it trains.
CONFIG="$TMP/job.json"
criteo_config "$CONFIG" "$TMP/ckpt" || exit 1
python3 - "$CONFIG" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["training"]["epochs"] = 80
c.pop("checkpoint", None)
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY

# The reference: the same job on one host's loopback, without SLURM.
REF="$TMP/loopback"
mkdir -p "$REF"
"$ROOT/scripts/make_job_keys.sh" "$TMP/keys" >/dev/null || exit 1
ref() { ip netns exec "$PFX-lo" "$@"; }
ref "$ROOT/scripts/run_master.sh" --config "$CONFIG" --keys "$TMP/keys" --bind tcp://127.0.0.1:5555 \
  --dump_dir "$REF/dump" >"$REF/master.log" 2>&1 &
PIDS+=($!)
master_pid=$!
for i in 0 1; do
  ref "$ROOT/scripts/run_ps.sh" --master tcp://127.0.0.1:5555 --keys "$TMP/keys" >"$REF/ps$i.log" 2>&1 &
  PIDS+=($!)
done
for r in 0 1; do
  ref "$ROOT/scripts/run_trainer.sh" --master tcp://127.0.0.1:5555 --keys "$TMP/keys" --rank $r --world 2 \
    --metrics_file "$REF/trainer$r.jsonl" >"$REF/trainer$r.log" 2>&1 &
  PIDS+=($!)
done
wait_pid "$master_pid" 300 || { echo "FAIL: the loopback reference failed:"; tail -n 5 "$REF/master.log"; exit 1; }
echo "PASS: loopback reference run"

# The job under SLURM; the third server's job once it trains.
RUN="$TMP/run"
in_m sbatch --wait --parsable --chdir "$ROOT" --nodes=5 --ntasks=5 --ntasks-per-node=1 \
  --nodelist=n-m,n-p0,n-p1,n-t0,n-t1 --output="$TMP/job-%j.out" \
  "$ROOT/scripts/slurm/tessera.sbatch" --config "$CONFIG" --servers 2 --trainers 2 --run_dir "$RUN" \
  --master_flags "--dump_dir $RUN/dump" >"$TMP/sbatch.out" 2>&1 &
PIDS+=($!)
job_pid=$!
# Until step 100, or the job's end (a failed job ends early).
deadline=$((SECONDS + 180))
until grep -q '"step":100,' "$RUN/trainer0.jsonl" 2>/dev/null || ! kill -0 "$job_pid" 2>/dev/null ||
  [ $SECONDS -ge $deadline ]; do
  sleep 0.2
done
if grep -q '"step":100,' "$RUN/trainer0.jsonl" 2>/dev/null; then
  in_m sbatch --wait --parsable --chdir "$ROOT" --ntasks=1 --nodelist=n-p2 --output="$TMP/add-%j.out" \
    "$ROOT/scripts/slurm/tessera_add_ps.sbatch" --run_dir "$RUN" >"$TMP/sbatch_add.out" 2>&1 &
  PIDS+=($!)
  add_pid=$!
else
  fail "the job under SLURM did not reach step 100:"; cat "$TMP/sbatch.out" "$TMP"/job-*.out 2>/dev/null | tail -n 20
  add_pid=""
fi
wait_pid "$job_pid" 300
code=$?
[ $code = 0 ] || { fail "the job under SLURM ended with $code:"; cat "$TMP"/job-*.out | tail -n 20; }
if [ -n "$add_pid" ]; then
  wait_pid "$add_pid" 60
  code=$?
  [ $code = 0 ] || { fail "the added server's job ended with $code:"; cat "$TMP"/add-*.out "$RUN"/ps-added-*.log | tail -n 20; }
fi

# Roles on their nodes, the added server taken in, the same parameters.
for i in 0 1; do
  grep -q "(tcp://${ADDR[p$i]}:" "$RUN/ps$i.log" 2>/dev/null ||
    fail "server $i did not advertise its node's address ${ADDR[p$i]}: $(grep registered "$RUN/ps$i.log")"
done
grep -q "(tcp://${ADDR[p2]}:" "$RUN"/ps-added-*.log 2>/dev/null || fail "the added server did not register from n-p2"
grep -q "generation 2: 3 parameter server(s)" "$RUN/master.log" 2>/dev/null ||
  fail "the master did not take the added server in: $(grep -h 'generation' "$RUN/master.log" | tail -n 2)"
if "$COMPARE" --config "$CONFIG" --a "$REF/dump" --b "$RUN/dump" --tolerance 1e-5 >"$TMP/compare.out" 2>&1; then
  echo "PASS: the job under SLURM equals the loopback run: $(tail -n 1 "$TMP/compare.out")"
else
  fail "the job under SLURM differs from the loopback run: $(cat "$TMP/compare.out")"
fi

if [ $FAILURES -gt 0 ]; then
  echo "slurm_test: $FAILURES failure(s)"
  KEEP_TMP=1
  exit 1
fi
echo "slurm_test: all passed"
