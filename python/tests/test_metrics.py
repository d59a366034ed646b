"""A Python trainer's Prometheus endpoint (tessera.init(metrics_port=...)),
scraped over HTTP as Prometheus would: the C++ trainer's families and
labels, with figures that match the steps this test ran."""

import re
import socket
import time
import urllib.request

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tessera
import tessera.torch as tt

ROWS = 32
BATCHES = [3, 4, 5, 6, 7]  # examples per step: the total tells the steps apart
SLOW_STEP, SLEEP_S = 1, 0.3

# The C++ trainer's families (trainer_metrics.cc) before any evaluation,
# and the process's.
FAMILIES = {
    "tessera_process_resident_memory_bytes": "gauge",
    "tessera_process_cpu_seconds_total": "counter",
    "tessera_trainer_steps_total": "counter",
    "tessera_trainer_examples_total": "counter",
    "tessera_trainer_step": "gauge",
    "tessera_trainer_generation": "gauge",
    "tessera_trainer_epoch": "gauge",
    "tessera_trainer_loss": "gauge",
    "tessera_trainer_examples_per_second": "gauge",
    "tessera_trainer_phase_seconds_total": "counter",
    "tessera_trainer_step_seconds": "histogram",
    "tessera_trainer_lookup_sent_bytes_total": "counter",
    "tessera_trainer_lookup_received_bytes_total": "counter",
}


def job_config(name):
    tables = [{"name": f"{s}_t", "num_embeddings": ROWS, "embedding_dim": 4, "feature_names": [f"{s}_f"],
               "sharding_type": s, "pooling": "SUM", "optimizer": {"type": "sgd", "lr": 0.1}}
              for s in ("table_wise", "row_wise")]
    return {"name": name, "tables": tables,
            "model": {"num_dense_features": 2, "bottom_mlp": [4], "top_mlp": [4, 1]},
            "data": {"source": "synthetic", "num_examples": 64, "ids_per_bag": 2},
            "training": {"batch_size": 8, "steps": len(BATCHES), "consistency": "sync", "seed": 3, "log_every": 1},
            "runtime": {"heartbeat_ms": 200, "peer_timeout_ms": 3000, "rpc_timeout_ms": 5000}}


def batch_of(features, size, rng):
    """A KJT of `size` examples, 1 to 3 ids in every bag."""
    lengths = rng.integers(1, 4, size=len(features) * size)
    values = rng.integers(0, ROWS, size=int(lengths.sum()))
    return tt.KeyedJaggedTensor(features, torch.from_numpy(values).long(), torch.from_numpy(lengths).int())


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url):
    """({(name, sorted label pairs): value}, {family: type}) of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a sample: {line!r}"
            samples[(m.group(1), tuple(sorted(LABEL.findall(m.group(2) or ""))))] = float(m.group(3))
    return samples, types


def value(samples, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no sample {key}; the scrape has {sorted(samples)}"
    return samples[key]


def test_a_python_trainer_serves_the_cpp_trainers_metrics(local_job):
    job = local_job(job_config("python_metrics"), num_ps=2)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True, metrics_port=0)
    url = session.metrics_url
    assert re.fullmatch(r"http://127\.0\.0\.1:[1-9][0-9]*/metrics", url), url
    ebc = tt.EmbeddingBagCollection(session)
    dense = torch.nn.Linear(sum(ebc.dims), 1)
    rng = np.random.default_rng(5)
    losses = []
    for step, size in enumerate(BATCHES):
        kjt = batch_of(ebc.features, size, rng)
        labels = torch.from_numpy(rng.integers(0, 2, size=size)).float()
        loss_sum = F.binary_cross_entropy_with_logits(dense(ebc(kjt).values()).squeeze(1), labels, reduction="sum")
        (loss_sum / size).backward()
        session.record_loss(loss_sum.item(), size)
        losses.append(loss_sum.item() / size)
        if step == SLOW_STEP:
            time.sleep(SLEEP_S)  # the loop's own time, which the step's "dense" phase holds
        if step == 2:
            ebc.eval()  # an evaluation between steps: no step, no examples
            with torch.no_grad():
                ebc(kjt)
            ebc.train()
    # The last step's gradients are not known taken until finish().
    mid, _ = scrape(url)
    session.finish()
    assert job.wait_master() == 0, job.log("master")
    end, types = scrape(url)  # served until the session is deleted

    assert types == FAMILIES
    r = {"rank": "0"}
    n = len(BATCHES)
    assert value(mid, "tessera_trainer_steps_total", **r) == n - 1
    assert value(mid, "tessera_trainer_examples_total", **r) == sum(BATCHES[:-1])
    assert value(mid, "tessera_trainer_loss", **r) == pytest.approx(losses[-2], rel=1e-12)
    assert value(mid, "tessera_trainer_step_seconds_count", **r) == n - 1

    assert value(end, "tessera_trainer_steps_total", **r) == n
    assert value(end, "tessera_trainer_examples_total", **r) == sum(BATCHES)
    assert value(end, "tessera_trainer_loss", **r) == pytest.approx(losses[-1], rel=1e-12)
    assert value(end, "tessera_trainer_step", **r) == n - 1
    assert value(end, "tessera_trainer_generation", **r) == session.generation
    assert value(end, "tessera_trainer_examples_per_second", **r) > 0
    for direction in ("sent", "received"):
        name = f"tessera_trainer_lookup_{direction}_bytes_total"
        assert value(end, name, **r) > value(mid, name, **r) > 0, name

    # One observation a step, the slow one above 0.1 s; the phases make up the steps.
    assert value(end, "tessera_trainer_step_seconds_count", **r) == n
    assert value(end, "tessera_trainer_step_seconds_bucket", le="+Inf", **r) == n
    assert value(end, "tessera_trainer_step_seconds_bucket", le="0.1", **r) <= n - 1
    step_s = value(end, "tessera_trainer_step_seconds_sum", **r)
    phases = {p: value(end, "tessera_trainer_phase_seconds_total", phase=p, **r)
              for p in ("data", "lookup", "dense", "allreduce", "push")}
    assert step_s >= SLEEP_S
    assert phases["dense"] >= SLEEP_S
    assert phases["lookup"] > 0 and phases["push"] > 0
    assert phases["data"] == 0 and phases["allreduce"] == 0
    assert sum(phases.values()) == pytest.approx(step_s, abs=1e-6)

    assert value(end, "tessera_process_resident_memory_bytes", role="trainer") > 1e6
    assert value(end, "tessera_process_cpu_seconds_total", role="trainer") > 0


def test_a_bad_metrics_port_raises_and_the_job_never_sees_the_trainer(local_job):
    job = local_job(job_config("python_metrics_port"), num_ps=2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(tessera.TesseraError, match=f"cannot bind the metrics endpoint to 127.0.0.1:{port}"):
            tessera.init(master=job.address, insecure=True, metrics_port=port)
    with pytest.raises(tessera.TesseraError, match="cannot bind the metrics endpoint to 203.0.113.7"):
        tessera.init(master=job.address, insecure=True, metrics_port=0, metrics_address="203.0.113.7")
    with pytest.raises(ValueError, match="70000 is not a port"):
        tessera.init(master=job.address, insecure=True, metrics_port=70000)
    with pytest.raises(TypeError, match="metrics_port must be an int or None, not str"):
        tessera.init(master=job.address, insecure=True, metrics_port="9100")

    # None of them joined: the job still waits for its one trainer.
    with tessera.init(master=job.address, insecure=True) as session:
        assert session.metrics_url is None
        ebc = tt.EmbeddingBagCollection(session)
        for size in BATCHES:
            ebc(batch_of(ebc.features, size, np.random.default_rng(size))).values().sum().backward()
    assert job.wait_master() == 0, job.log("master")
