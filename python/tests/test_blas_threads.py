"""tessera.set_blas_threads reaches the matrix products torch runs.

Debian's torch calls the system's OpenBLAS, whose pthread build ignores
torch.set_num_threads: a trainer that asked torch for one thread still had
OpenBLAS workers computing and spinning beside it (a sixth of the machine in
the W1 benchmark). Each case runs in a fresh interpreter (the setting is the
process's) and counts the CPU ticks of every thread but the main one while
torch multiplies large matrices."""

import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD

PROBE = r"""
import json, os, sys, threading
import torch
import tessera

def ticks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = int(fields[11]) + int(fields[12])  # utime + stime
    return out

threads = int(sys.argv[1])
torch.set_num_threads(threads)
tessera.set_blas_threads(threads)
a = torch.randn(1024, 1024)
a @ a  # OpenBLAS starts its workers
openblas = any("openblas" in line for line in open("/proc/self/maps"))
before = ticks()
for _ in range(30):
    a @ a
after = ticks()
main = threading.get_native_id()
spent = {t: after[t] - before.get(t, 0) for t in after}
print(json.dumps({"openblas": openblas, "blas_threads": tessera.blas_threads(),
                  "main": spent.get(main, 0), "others": sum(v for t, v in spent.items() if t != main)}))
"""


def probe(threads):
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", PROBE, str(threads)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_one_blas_thread_keeps_torchs_matrix_products_on_the_calling_thread():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS starts no workers to count")
    two = probe(2)
    if not two["openblas"]:
        pytest.skip("this torch does not run on OpenBLAS (MKL's threads follow torch.set_num_threads)")
    assert two["blas_threads"] == 2
    # The measure sees OpenBLAS's workers when they are allowed to run...
    assert two["others"] > 0.2 * (two["main"] + two["others"]), two
    one = probe(1)
    assert one["blas_threads"] == 1
    # ...and none of torch's matrix products leave the calling thread with one.
    assert one["others"] <= 0.05 * (one["main"] + one["others"]), one


def test_set_blas_threads_refuses_fewer_than_one():
    import tessera
    with pytest.raises(ValueError, match="threads must be >= 1"):
        tessera.set_blas_threads(0)
    with pytest.raises(TypeError):
        tessera.set_blas_threads("two")


CORE_PROBE = r"""
import json, tessera
print(json.dumps({"core": tessera.blas_core(), "better": tessera.better_blas_core(), "advice": tessera.blas_advice()}))
"""


def core_probe(coretype):
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([sys.executable, "-c", CORE_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_advice_names_kernels_that_end_the_fallback():
    """Where OpenBLAS fell back, the advice names a core; started with it, the
    process runs that core and nothing more is advised."""
    first = core_probe(None)
    assert first["core"]
    if not first["better"]:
        assert first["advice"] is None
        pytest.skip(f"OpenBLAS knows this CPU (it chose {first['core']}): nothing to advise")
    assert first["core"] == "Prescott"
    assert f"OPENBLAS_CORETYPE={first['better']}" in first["advice"]
    second = core_probe(first["better"])
    assert second["core"] == first["better"]
    assert second["better"] == "" and second["advice"] is None
