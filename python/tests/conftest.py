"""A real job on 127.0.0.1 for the tests: a master and its parameter servers
started from the build tree, their pids killed (and waited for) at the end
whatever the test did. TESSERA_BUILD_DIR says where the binaries are
(default: build/ beside python/)."""

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TESSERA_BUILD_DIR", ROOT / "build"))


class LocalJob:
    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.procs = []

    def start(self, config, num_ps, num_trainers, master_flags=(), keys=None):
        # keys: the job's key folder (written here when missing), or None for --insecure.
        self.security = ["--insecure"]
        if keys is not None:
            if not pathlib.Path(keys).exists():
                subprocess.run([str(BUILD / "master" / "tessera_master"), "--make_keys", str(keys)], check=True,
                               capture_output=True)
            self.security = ["--keys", str(keys)]
        cfg = self.tmp / "job.json"
        cfg.write_text(json.dumps(config))
        endpoint = self.tmp / "master.endpoint"
        self.summary = self.tmp / "summary.json"
        self.master = self._start("master", [
            str(BUILD / "master" / "tessera_master"), "--config", str(cfg), *self.security,
            "--bind", "tcp://127.0.0.1:0", "--endpoint_file", str(endpoint),
            "--num_ps", str(num_ps), "--num_trainers", str(num_trainers),
            "--summary_file", str(self.summary), *master_flags])
        deadline = time.time() + 30
        while not endpoint.exists() or not endpoint.read_text().strip():
            if time.time() > deadline or self.master.poll() is not None:
                raise RuntimeError("the master did not start: " + self.log("master"))
            time.sleep(0.05)
        self.address = endpoint.read_text().strip()
        self.servers = [self._start(f"ps{i}", [str(BUILD / "ps" / "tessera_ps"), "--master", self.address,
                                               *self.security]) for i in range(num_ps)]

    def add_server(self):
        """One more parameter server, which registers with the running job."""
        i = len(self.servers)
        self.servers.append(self._start(f"ps{i}", [str(BUILD / "ps" / "tessera_ps"), "--master", self.address,
                                                   *self.security]))

    def _start(self, name, argv):
        out = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def log(self, name):
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def wait_master(self, timeout=60):
        return self.master.wait(timeout=timeout)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait(timeout=30)


@pytest.fixture
def local_job(tmp_path):
    """local_job(config, num_ps=2, num_trainers=1, master_flags=(), keys=None) -> LocalJob (stopped at the
    end); keys: a key folder (written when missing) instead of --insecure."""
    for binary in (BUILD / "master" / "tessera_master", BUILD / "ps" / "tessera_ps"):
        if not binary.exists():
            pytest.fail(f"{binary} is missing: build first (scripts/build.sh) or set TESSERA_BUILD_DIR")
    jobs = []

    def start(config, num_ps=2, num_trainers=1, master_flags=(), keys=None):
        d = tmp_path / f"job{len(jobs)}"
        d.mkdir()
        job = LocalJob(d)
        jobs.append(job)  # stopped at the end even if it fails to start
        job.start(config, num_ps, num_trainers, master_flags, keys)
        return job

    yield start
    for job in jobs:
        job.stop()


def read_rows(module, rows):
    """Every table's rows 0..rows-1 as the servers hold them (one bag per row
    id, weight 1), read through a tessera.torch module without opening a
    step: {feature: rows}, whatever the module's own output."""
    import torch
    import tessera.torch as tt
    features = module.features
    kjt = tt.KeyedJaggedTensor(features, torch.arange(rows, dtype=torch.int64).repeat(len(features)),
                               torch.ones(rows * len(features), dtype=torch.int32),
                               torch.ones(rows * len(features), dtype=torch.float32))
    module.eval()
    with torch.no_grad():
        out = module._lookup(kjt)
    module.train()
    return {f: out[f].clone() for f in features}
