"""tessera.torch against torch.nn.EmbeddingBag, on a real job: 2 parameter
servers, every sharding type crossed with every pooling, SGD on the servers.

A step's outputs must equal EmbeddingBag's over the rows the servers hold,
and the rows after the step must equal those rows minus lr times
EmbeddingBag's weight gradient (max |diff| <= 1e-6)."""

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import tessera
import tessera.torch as tt
from conftest import BUILD, read_rows

ROWS = 24
LR = 0.5
SHARDINGS = ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"]
POOLINGS = ["SUM", "MEAN", "WEIGHTED", "NONE"]
TABLES = [(s, p) for s, p in itertools.product(SHARDINGS, POOLINGS)]


def table_name(sharding, pooling):
    return f"{sharding}_{pooling.lower()}"


def job_config(name, weighted_only=None, runtime=None, steps=8):
    tables = []
    for i, (sharding, pooling) in enumerate(TABLES):
        n = table_name(sharding, pooling)
        tables.append({"name": n, "num_embeddings": ROWS, "embedding_dim": 4 + (i % 3) * 2,
                       "feature_names": [n + "_f"], "sharding_type": sharding,
                       "pooling": "SUM" if pooling == "WEIGHTED" else pooling,
                       "optimizer": {"type": "sgd", "lr": LR},
                       "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}})
    return {"name": name, "tables": tables,
            "model": {"num_dense_features": 2, "bottom_mlp": [4], "top_mlp": [4, 1]},
            "data": {"source": "synthetic", "num_examples": 64, "ids_per_bag": 2},
            "training": {"batch_size": 6, "steps": steps, "consistency": "sync", "seed": 3, "log_every": 1},
            "runtime": runtime or {"heartbeat_ms": 200, "peer_timeout_ms": 3000, "rpc_timeout_ms": 5000}}


def make_kjt(features, lengths_per_feature, rng, weighted_features):
    lengths, values, weights = [], [], []
    for f, lens in zip(features, lengths_per_feature):
        for n in lens:
            lengths.append(n)
            values.extend(rng.integers(0, ROWS, size=n).tolist())
            w = rng.uniform(0.5, 1.5, size=n) if f in weighted_features else np.ones(n)
            weights.extend(w.tolist())
    return tt.KeyedJaggedTensor(features, torch.tensor(values, dtype=torch.int64),
                                torch.tensor(lengths, dtype=torch.int32),
                                torch.tensor(weights, dtype=torch.float32))


def reference_step(emb, kjt, lens, before, upstream):
    """What torch.nn.EmbeddingBag (or embedding, unpooled) gives for `kjt`
    over the rows `before`, per feature: (output, rows after an SGD step on
    the loss sum(output * upstream))."""
    result, offset = {}, 0
    for (sharding, pooling), f in zip(TABLES, emb.features):
        n = sum(lens[emb.features.index(f)])
        ids = kjt.values()[offset:offset + n]
        w = kjt.weights_or_none()[offset:offset + n]
        offset += n
        weight = torch.nn.Parameter(before[f].clone())
        if pooling == "NONE":
            ref = torch.nn.functional.embedding(ids, weight)
        else:
            mode = "mean" if pooling == "MEAN" else "sum"
            offsets = torch.tensor([0] + np.cumsum(lens[emb.features.index(f)])[:-1].tolist())
            ref = torch.nn.functional.embedding_bag(ids, weight, offsets, mode=mode,
                                                    per_sample_weights=w if pooling == "WEIGHTED" else None)
        (ref * upstream[f]).sum().backward()
        result[f] = (ref.detach(), before[f] - LR * weight.grad)
    return result


def random_step(emb, rng, step):
    """A batch of bags of 0..4 ids (some repeated, one empty bag at least)
    and the gradients a loss sends back for each feature's output."""
    lens = [[0] + rng.integers(0, 5, size=5).tolist() for _ in emb.features]
    weighted = {table_name(s, "WEIGHTED") + "_f" for s in SHARDINGS}
    kjt = make_kjt(emb.features, lens, rng, weighted)
    batch = len(lens[0])
    upstream = {f: torch.randn((batch if p != "NONE" else sum(lens[i]), emb.dims[i]),
                               generator=torch.Generator().manual_seed(step * 100 + i))
                for i, (f, (_, p)) in enumerate(zip(emb.features, TABLES))}
    return kjt, lens, upstream


def test_steps_match_embedding_bag_for_every_sharding_and_pooling(local_job):
    job = local_job(job_config("python_grads"), num_ps=2)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    assert emb.features == [table_name(s, p) + "_f" for s, p in TABLES]
    rng = np.random.default_rng(7)
    for step in range(3):
        before = read_rows(emb, ROWS)
        kjt, lens, upstream = random_step(emb, rng, step)
        out = emb(kjt)
        loss = sum((out[f] * upstream[f]).sum() for f in emb.features)
        loss.backward()
        after = read_rows(emb, ROWS)
        expected = reference_step(emb, kjt, lens, before, upstream)
        for (sharding, pooling), f in zip(TABLES, emb.features):
            where = f"{sharding}/{pooling} step {step}"
            ref, rows = expected[f]
            assert out[f].shape == ref.shape, where
            assert (out[f] - ref).abs().max().item() <= 1e-6, where
            diff = (after[f] - rows).abs().max().item()
            assert diff <= 1e-6, f"{where}: rows after the step differ by {diff}"
    session.finish()
    assert job.wait_master() == 0, job.log("master")


@pytest.mark.parametrize("consistency", ["sync", "async"])
def test_an_evaluation_between_forward_and_backward_changes_nothing(local_job, consistency):
    """A loop that evaluates another batch (torch.no_grad) after a training
    forward and before its backward, as PyTorch allows: the evaluation reads
    the rows that forward read, and the step's gradients still reach the
    rows that forward looked up. Before, a sync job's servers held the
    evaluation until the push that waited for it (a deadlock until the
    deadline), and the push took the evaluation's routes."""
    config = job_config(f"python_eval_mid_step_{consistency}")
    config["training"]["consistency"] = consistency
    job = local_job(config, num_ps=2)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    rng = np.random.default_rng(11)
    before = read_rows(emb, ROWS)  # nothing pushed yet: the initial rows, in either mode
    kjt, lens, upstream = random_step(emb, rng, 0)
    out = emb(kjt)
    start = time.time()
    during = read_rows(emb, ROWS)  # a batch of another shape, every row of every table
    assert time.time() - start < 2, "the evaluation waited"
    for f in emb.features:
        assert torch.equal(during[f], before[f]), f
    sum((out[f] * upstream[f]).sum() for f in emb.features).backward()
    # The rows after the step, by a training lookup (one that waits for this trainer's own push in an async
    # job too) whose zero gradients change nothing.
    every_row = tt.KeyedJaggedTensor(emb.features, torch.arange(ROWS, dtype=torch.int64).repeat(len(emb.features)),
                                     torch.ones(ROWS * len(emb.features), dtype=torch.int32),
                                     torch.ones(ROWS * len(emb.features), dtype=torch.float32))
    after = emb(every_row)
    sum((o * 0).sum() for o in after.values()).backward()
    expected = reference_step(emb, kjt, lens, before, upstream)
    for (sharding, pooling), f in zip(TABLES, emb.features):
        diff = (after[f].detach() - expected[f][1]).abs().max().item()
        assert diff <= 1e-6, f"{sharding}/{pooling}: rows after the step differ by {diff}"
    session.finish()
    assert job.wait_master() == 0, job.log("master")


def test_bag_collection_returns_a_keyed_tensor_and_checks_its_configs(local_job):
    config = job_config("python_ebc")
    config["tables"] = [t for t in config["tables"] if t["pooling"] != "NONE"]
    job = local_job(config, num_ps=2)
    with tessera.init(master=job.address, rank=0, world=1, insecure=True) as session:
        t = config["tables"][0]
        wrong = tt.EmbeddingBagConfig(num_embeddings=ROWS + 1, embedding_dim=t["embedding_dim"], name=t["name"],
                                      feature_names=t["feature_names"])
        with pytest.raises(ValueError, match="num_embeddings 25 here, 24 in the job"):
            tt.EmbeddingBagCollection(session, tables=[wrong])
        with pytest.raises(ValueError, match="not in the job"):
            tt.EmbeddingBagCollection(session, tables=[tt.EmbeddingBagConfig(4, 4, name="nope")])
        right = tt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=t["embedding_dim"], name=t["name"],
                                      feature_names=t["feature_names"], pooling=tt.PoolingType.SUM)
        ebc = tt.EmbeddingBagCollection(session, tables=[right])
        assert list(ebc.parameters()) == []
        rng = np.random.default_rng(1)
        kjt = make_kjt(ebc.features, [[1, 2, 3]] * len(ebc.features), rng, set())
        kt = ebc(kjt)
        assert kt.keys() == ebc.features
        assert kt.values().shape == (3, sum(ebc.dims))
        assert kt.values().requires_grad
        kt.values().sum().backward()
    assert job.wait_master() == 0, job.log("master")


def test_bad_input_raises_a_clear_python_exception(local_job):
    config = job_config("python_bad_input")
    job = local_job(config, num_ps=2)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    F = len(emb.features)
    ones = torch.ones(F * 2, dtype=torch.int32)

    def kjt(values=None, lengths=None, keys=None, weights=None):
        return tt.KeyedJaggedTensor(keys or emb.features,
                                    torch.zeros(F * 2, dtype=torch.int64) if values is None else values,
                                    ones if lengths is None else lengths, weights)

    with pytest.raises(TypeError, match="values: expected dtype torch.int64, got torch.int32"):
        emb(kjt(values=torch.zeros(F * 2, dtype=torch.int32)))
    with pytest.raises(TypeError, match="weights: expected dtype torch.float32, got torch.float64"):
        emb(kjt(weights=torch.ones(F * 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="features the job does not"):
        emb(kjt(keys=emb.features[:-1] + ["no_such_feature"]))
    with pytest.raises(ValueError, match="lengths"):
        emb(kjt(lengths=torch.ones(F * 2 + 1, dtype=torch.int32)))
    with pytest.raises(ValueError):  # lengths that do not sum to the ids
        emb(kjt(lengths=torch.full((F * 2,), 2, dtype=torch.int32)))
    with pytest.raises((ValueError, tessera.TesseraError), match=str(ROWS)):
        emb(kjt(values=torch.full((F * 2,), ROWS, dtype=torch.int64)))
    with pytest.raises((ValueError, tessera.TesseraError)):
        emb(kjt(values=torch.full((F * 2,), -1, dtype=torch.int64)))
    # Gradients of the wrong shape, or none owed, never reach the servers.
    outs = session.lookup(emb.features, 2, ones.numpy(), np.zeros(F * 2, dtype=np.int64))
    with pytest.raises(ValueError, match="has 3 values"):
        session.push([np.zeros(3, dtype=np.float32)] + [np.zeros_like(o) for o in outs[1:]])
    with pytest.raises(TypeError, match="float32"):
        session.push([o.astype(np.float64) for o in outs])
    with pytest.raises(tessera.TesseraError, match="never sent back"):
        session.lookup(emb.features, 2, ones.numpy(), np.zeros(F * 2, dtype=np.int64))
    session.push([np.zeros_like(o) for o in outs])
    with pytest.raises(tessera.TesseraError, match="no training lookup"):
        session.push([np.zeros_like(o) for o in outs])
    # The job goes on after all of it.
    out = emb(kjt())
    sum(o.sum() for o in out.values()).backward()
    session.finish()
    assert job.wait_master() == 0, job.log("master")


def test_a_non_finite_gradient_raises_at_its_backward_and_the_step_stays_owed(local_job):
    """A NaN or an infinity in an output's gradient raises at the backward
    that made it, naming the feature and the place, and sends nothing: the
    step's gradients can still go (here through session.push), and the job
    goes on."""
    config = job_config("python_non_finite")
    config["tables"] = config["tables"][:4]
    job = local_job(config, num_ps=1)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    F = len(emb.features)
    kjt = tt.KeyedJaggedTensor(emb.features, torch.zeros(F * 2, dtype=torch.int64), torch.ones(F * 2, dtype=torch.int32))
    for bad in (float("nan"), float("inf")):
        out = emb(kjt)
        before = read_rows(emb, ROWS)
        scale = torch.ones_like(out[emb.features[1]])
        scale[1, 2] = bad
        loss = sum(o.sum() for o in out.values()) + (out[emb.features[1]] * scale).sum()
        with pytest.raises(ValueError, match=rf"'{emb.features[1]}' is -?{bad}.* at \[1, 2\]: nothing sent"):
            loss.backward()
        with pytest.raises(tessera.TesseraError, match="never sent back"):
            emb(kjt)
        session.push([np.zeros(tuple(o.shape), dtype=np.float32) for o in out.values()])
        after = read_rows(emb, ROWS)
        for f in emb.features:
            assert torch.equal(after[f], before[f]), f
    sum(o.sum() for o in emb(kjt).values()).backward()
    session.finish()
    assert job.wait_master() == 0, job.log("master")


def test_a_push_the_servers_refuse_breaks_the_session_at_once(local_job):
    """A push the servers refuse (here float32 gradients near its largest
    value, which bfloat16 on the wire rounds to infinity) can never be sent
    again, so its step cannot complete: the next call raises the servers'
    reason, and so does every call after it, at once, not after a sync
    job's servers held a lookup until the deadline."""
    config = job_config("python_refused_push")
    config["tables"] = config["tables"][:1]
    config["training"]["qcomms"] = {"forward_precision": "fp32", "backward_precision": "bf16"}
    job = local_job(config, num_ps=1)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    kjt = tt.KeyedJaggedTensor(emb.features, torch.zeros(2, dtype=torch.int64), torch.ones(2, dtype=torch.int32))
    out = emb(kjt)[emb.features[0]]
    (out * 3.4e38).sum().backward()  # finite here: sent
    for _ in range(2):
        start = time.time()
        with pytest.raises(ValueError, match="non-finite gradient"):
            emb(kjt)
        assert time.time() - start < 2
    with pytest.raises(ValueError, match="non-finite gradient"):
        session.finish()
    assert job.wait_master() != 0


def test_a_dead_server_raises_instead_of_hanging(local_job):
    config = job_config("python_dead_server",
                        runtime={"heartbeat_ms": 100, "peer_timeout_ms": 1500, "rpc_timeout_ms": 4000})
    job = local_job(config, num_ps=2)
    session = tessera.init(master=job.address, rank=0, world=1, insecure=True)
    emb = tt.RemoteEmbeddings(session)
    F = len(emb.features)
    kjt = tt.KeyedJaggedTensor(emb.features, torch.zeros(F, dtype=torch.int64), torch.ones(F, dtype=torch.int32))
    sum(o.sum() for o in emb(kjt).values()).backward()
    os.kill(job.servers[1].pid, signal.SIGKILL)
    job.servers[1].wait()
    start = time.time()
    with pytest.raises(tessera.TesseraError) as lost:
        for _ in range(50):  # the master aborts the job within its peer timeout
            sum(o.sum() for o in emb(kjt).values()).backward()
    print("the error:", lost.value)
    assert time.time() - start < 30
    with pytest.raises(tessera.TesseraError):
        session.finish()


def run_ranks(trainer, errors, world=2):
    """trainer(rank) for each rank in threads of this process, at most 60 s;
    each appends what it raised to `errors`, asserted empty here."""
    threads = [threading.Thread(target=trainer, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_two_trainers_in_sync_mode_see_each_others_updates(local_job):
    config = job_config("python_two_trainers")
    config["tables"] = config["tables"][:4]  # one of each pooling, table-wise
    job = local_job(config, num_ps=2, num_trainers=2)
    results, errors = {}, []

    def trainer(rank):
        try:
            with tessera.init(master=job.address, rank=rank, world=2, insecure=True) as session:
                emb = tt.RemoteEmbeddings(session)
                F = len(emb.features)
                # Both trainers push a gradient of ones onto row `rank`.
                kjt = tt.KeyedJaggedTensor(emb.features, torch.full((F,), rank, dtype=torch.int64),
                                           torch.ones(F, dtype=torch.int32))
                before = read_rows(emb, ROWS)
                sum(o.sum() for o in emb(kjt).values()).backward()
                results[rank] = (before, read_rows(emb, ROWS))  # waits for both trainers' step 0
        except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    run_ranks(trainer, errors)
    for rank in range(2):
        before, after = results[rank]
        other = 1 - rank
        for f in before:
            # Each trainer sees its own update and the other's.
            assert (results[other][1][f] - after[f]).abs().max().item() == 0, f
            assert (before[f][rank] - after[f][rank]).abs().max().item() > 0, f
    assert job.wait_master() == 0, job.log("master")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_bf16_job_gives_python_rows_rounded_to_bfloat16(local_job, precision):
    """training.qcomms reaches Python trainers through the job: with bf16
    every value a table-wise lookup returns is a bfloat16 (its low 16 bits
    zero) in a float32 tensor; with fp32 the rows are as stored."""
    config = job_config(f"python_qcomms_{precision}")
    config["tables"] = config["tables"][:4]  # one of each pooling, table-wise: no partial sums on the trainer
    config["training"]["qcomms"] = {"forward_precision": precision, "backward_precision": precision}
    # Pooled by the server: bf16 makes row replies (pooled here, in float32)
    # pay off sooner, and a sum of bfloat16 rows is no bfloat16.
    config["training"]["row_replies"] = "never"
    job = local_job(config, num_ps=1, num_trainers=1)
    with tessera.init(master=job.address, rank=0, world=1, insecure=True) as session:
        assert session.job["training"]["qcomms"]["forward_precision"] == precision
        emb = tt.RemoteEmbeddings(session)
        rng = np.random.default_rng(5)
        F = len(emb.features)
        kjt = make_kjt(emb.features, [[2, 1, 3]] * F, rng, {emb.features[2]})
        outs = emb(kjt)
        low_bits = [int((o.detach().numpy().view(np.uint32) & 0xFFFF).max()) for o in outs.values()]
        if precision == "bf16":
            assert low_bits == [0] * F, low_bits
        else:
            assert all(b > 0 for b in low_bits), low_bits  # uniform(-0.1, 0.1) rows are not bfloat16s
        sum(o.sum() for o in outs.values()).backward()
    assert job.wait_master() == 0, job.log("master")


def train_one_step(session):
    """One training step of one id per feature, lookup and push."""
    emb = tt.RemoteEmbeddings(session)
    kjt = tt.KeyedJaggedTensor(emb.features, torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int32))
    sum(o.sum() for o in emb(kjt).values()).backward()


def test_the_store_for_the_programs_process_group(local_job):
    """tessera.torch.Store: the master's rendezvous store as torch's, shared
    by the job's trainers: gets wait for a key, adds count atomically, a key
    never set times out with its name, and torch's Gloo group meets there."""
    import datetime
    import torch.distributed as dist
    config = job_config("python_store")
    config["tables"] = config["tables"][:1]
    job = local_job(config, num_ps=1, num_trainers=2)
    errors, sums = [], {}

    def trainer(rank):
        try:
            with tessera.init(master=job.address, rank=rank, world=2, insecure=True) as session:
                store = tt.Store(session, timeout=datetime.timedelta(seconds=20))
                assert isinstance(store, dist.Store)
                if rank == 1:
                    time.sleep(0.3)  # rank 0's get waits for it
                    store.set("hello", b"from 1")
                else:
                    assert store.get("hello") == b"from 1"
                for _ in range(5):
                    store.add("counter", rank + 1)
                store.wait(["hello"])
                quick = tt.Store(session, timeout=datetime.timedelta(seconds=0.2))
                try:
                    quick.get(f"never set by {rank}")
                    raise AssertionError("a key never set was read")
                except RuntimeError as e:
                    assert f"never set by {rank}" in str(e), e
                # A process group of the program's own, over it.
                pg = dist.ProcessGroupGloo(dist.PrefixStore("pg", store), rank, 2, datetime.timedelta(seconds=20))
                t = torch.full((3,), float(rank + 1))
                pg.allreduce([t]).wait()
                sums[rank] = (t, store.add("counter", 0))
                train_one_step(session)
        except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    run_ranks(trainer, errors)
    for rank in range(2):
        assert torch.equal(sums[rank][0], torch.full((3,), 3.0))
        assert sums[rank][1] == 15  # 5 x 1 + 5 x 2, after both added (the allreduce ordered it)
    assert job.wait_master() == 0, job.log("master")


def module_of_every_dtype(rank, extra=False):
    """A module whose parameters and buffers differ on every rank and cover
    what a bytewise broadcast must keep: -0.0, a NaN's payload, float64,
    bfloat16, int64, bool, an odd byte count and a non-contiguous buffer."""
    g = torch.Generator().manual_seed(rank)
    m = torch.nn.Module()
    w = torch.randn(5, 3, generator=g)
    if rank == 0:
        w[0, 0] = -0.0
        w.view(-1).view(torch.int32)[1] = 0x7FA00123  # a NaN with a payload
    m.w = torch.nn.Parameter(w)
    m.h = torch.nn.Parameter(torch.randn(7, generator=g).to(torch.bfloat16))
    m.register_buffer("d", torch.randn(4, generator=g, dtype=torch.float64))
    m.register_buffer("count", torch.tensor([rank * 1000 + 7, -(2**62) + rank], dtype=torch.int64))
    m.register_buffer("mask", torch.tensor([rank == 0, rank != 0, True]))
    m.register_buffer("odd", torch.arange(5, dtype=torch.uint8) + rank)
    m.register_buffer("t", (torch.arange(12, dtype=torch.float32) + 100 * rank).reshape(3, 4).t())
    if extra:
        m.register_buffer("extra", torch.zeros(2))
    return m


def bytes_of_module(m):
    return [t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            for t in list(m.parameters()) + list(m.buffers())]


@pytest.mark.parametrize("security", ["insecure", "keys"])
def test_broadcast_module_makes_every_trainer_equal_to_src_bit_for_bit(tmp_path, local_job, security):
    """tessera.torch.broadcast_module copies trainer src's parameters and
    buffers, of every dtype, to the other trainers bit for bit (-0.0 and a
    NaN's payload kept) through the session's collective; modules of another
    layout raise ValueError on every trainer and are left as they were."""
    config = job_config("python_broadcast")
    config["tables"] = config["tables"][:1]
    keys = tmp_path / "keys" if security == "keys" else None
    job = local_job(config, num_ps=1, num_trainers=2, keys=keys)
    errors, got = [], {}
    src_bytes = bytes_of_module(module_of_every_dtype(1))

    def trainer(rank):
        try:
            kw = {"keys": str(keys)} if keys else {"insecure": True}
            with tessera.init(master=job.address, rank=rank, world=2, **kw) as session:
                m = module_of_every_dtype(rank)
                assert (bytes_of_module(m) == src_bytes) == (rank == 1)
                tt.broadcast_module(m, session, src=1)
                got[rank] = bytes_of_module(m)
                # Another layout on rank 1: both refuse, and neither module changes.
                other = module_of_every_dtype(rank + 10, extra=rank == 1)
                before = bytes_of_module(other)
                with pytest.raises(ValueError, match="differ in layout"):
                    tt.broadcast_module(other, session)
                assert bytes_of_module(other) == before
                with pytest.raises(ValueError, match="not a trainer rank"):
                    tt.broadcast_module(m, session, src=2)
                train_one_step(session)
        except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    run_ranks(trainer, errors)
    for rank in range(2):
        assert got[rank] == src_bytes, f"rank {rank}"
    assert job.wait_master() == 0, job.log("master")


@pytest.mark.parametrize("security", ["insecure", "keys"])
def test_allreduce_sum_and_the_ddp_hook_sum_over_the_trainers(tmp_path, local_job, security):
    """session.allreduce_sum sums in place over the job's trainers (sealed
    with keys), tessera.torch.sealed_allreduce_hook averages a DDP bucket
    through it (or sums it, with average=False), and arrays it cannot sum in place are refused."""
    config = job_config("python_allreduce")
    config["tables"] = config["tables"][:1]
    keys = tmp_path / "keys" if security == "keys" else None
    job = local_job(config, num_ps=1, num_trainers=2, keys=keys)
    errors, got = [], {}

    class Bucket:  # what DDP hands a communication hook
        def __init__(self, tensor, last=False):
            self._tensor = tensor
            self._last = last

        def buffer(self):
            return self._tensor

        def is_last(self):
            return self._last

    def trainer(rank):
        try:
            kw = {"keys": str(keys)} if keys else {"insecure": True}
            with tessera.init(master=job.address, rank=rank, world=2, **kw) as session:
                a = np.arange(100003, dtype=np.float32) * (rank + 1)
                session.allreduce_sum(a)
                # The hook's sums run on a thread of their own, in the order the hook was called in, also
                # against sums of this thread: rank 1 calls them in a different rhythm. The last bucket's
                # runs on this thread, after the others'.
                state = tt.SealedAllreduce(session)
                buckets = [torch.full((n,), float(rank + 1)) for n in (7, 100, 3000, 5)]
                futures = []
                for i, t in enumerate(buckets):
                    if rank == 1 and i == 1:
                        time.sleep(0.2)
                    futures.append(tt.sealed_allreduce_hook(state, Bucket(t, last=i == len(buckets) - 1)))
                assert futures[-1].done()
                b = np.full(11, float(rank + 1), dtype=np.float32)
                session.allreduce_sum(b)  # after the buckets' sums, though on this thread
                done = [f.wait() for f in futures]
                # average=False: summed, not averaged.
                summed = torch.full((33,), float(rank + 1))
                summed_done = tt.sealed_allreduce_hook(tt.SealedAllreduce(session, average=False),
                                                       Bucket(summed)).wait()
                got[rank] = (a, done, buckets, b, summed, summed_done)
                with pytest.raises(TypeError, match="SealedAllreduce"):
                    tt.sealed_allreduce_hook(session, Bucket(buckets[0]))
                # Tickets: one never taken, one used already; both refused at once, not waited for.
                with pytest.raises(ValueError, match="never taken"):
                    session.allreduce_sum(b, 10**6)
                with pytest.raises(RuntimeError, match="used already"):
                    session.allreduce_sum(b, 0)
                with pytest.raises(TypeError, match="float32"):
                    session.allreduce_sum(np.zeros(3, dtype=np.float64))
                with pytest.raises(TypeError, match="numpy array"):
                    session.allreduce_sum([1.0, 2.0])
                with pytest.raises(ValueError, match="C-contiguous"):
                    session.allreduce_sum(np.zeros((4, 4), dtype=np.float32)[:, 1])
                train_one_step(session)
        except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(e)

    run_ranks(trainer, errors)
    want = np.arange(100003, dtype=np.float32) * 3
    for rank in range(2):
        a, done, buckets, b, summed, summed_done = got[rank]
        assert np.array_equal(a, want), f"rank {rank}"
        for d, t in zip(done, buckets):
            assert d is t and torch.equal(t, torch.full(t.shape, 1.5))  # (1 + 2) / 2, in the bucket's own tensor
        assert summed_done is summed and torch.equal(summed, torch.full((33,), 3.0))  # 1 + 2
        assert np.array_equal(b, np.full(11, 3.0, dtype=np.float32))
    assert job.wait_master() == 0, job.log("master")


def train_steps(session, emb, steps, seed, between=None):
    """`steps` steps of a fixed random stream; between(step) runs before
    each. Returns every table's rows at the end."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        if between:
            between(step)
        lens = [rng.integers(0, 4, size=5).tolist() for _ in emb.features]
        kjt = make_kjt(emb.features, lens, rng, set())
        out = emb(kjt)
        sum((o * (k + 1)).sum() for k, o in enumerate(out.values())).backward()
    return read_rows(emb, ROWS)


def test_a_server_added_mid_job_changes_nothing_in_the_result(local_job):
    """A Python trainer follows a change of the servers at a step boundary:
    the rows at the end equal those of a job that kept its one server."""
    config = job_config("python_add_ps")
    config["tables"] = [t for t in config["tables"] if t["sharding_type"] in ("row_wise", "table_wise")]
    steps = 12

    undisturbed = local_job(config, num_ps=1)
    with tessera.init(master=undisturbed.address, insecure=True) as session:
        expected = train_steps(session, tt.RemoteEmbeddings(session), steps, seed=11)
    assert undisturbed.wait_master() == 0, undisturbed.log("master")

    job = local_job(config, num_ps=1)
    generations = []
    with tessera.init(master=job.address, insecure=True) as session:
        emb = tt.RemoteEmbeddings(session)

        def add_server(step):
            generations.append(session.generation)
            if step == 4:
                job.add_server()
                # The master re-plans once the newcomer heartbeats, copies
                # the moving rows ahead, and asks for a boundary.
                deadline = time.time() + 30
                while not session.boundary_requested and time.time() < deadline:
                    time.sleep(0.05)
                assert session.boundary_requested, job.log("master")

        got = train_steps(session, emb, steps, seed=11, between=add_server)
        assert generations[5] > generations[4], "the servers did not change at step 5"
    assert job.wait_master() == 0, job.log("master")
    for f in expected:
        assert torch.equal(got[f], expected[f]), f


def test_embedding_bag_takes_what_nn_embedding_bag_takes(local_job):
    config = job_config("python_embedding_bag")
    config["tables"] = [t for t in config["tables"] if t["name"] == "row_wise_sum"]
    job = local_job(config, num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        bag = tt.EmbeddingBag(session)
        rows = read_rows(bag, ROWS)[bag.features[0]]
        ref = torch.nn.EmbeddingBag.from_pretrained(rows, mode="sum")
        bag.eval()
        with torch.no_grad():
            ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
            offsets = torch.tensor([0, 2, 2, 5])  # one empty bag
            assert torch.equal(bag(ids, offsets), ref(ids, offsets))
            grid = torch.tensor([[3, 1], [4, 1], [5, 9]])
            assert torch.equal(bag(grid), ref(grid))
            w = torch.rand(8)
            assert (bag(ids, offsets, per_sample_weights=w) - ref(ids, offsets, per_sample_weights=w)).abs().max() <= 1e-6
            with pytest.raises(ValueError, match="offsets"):
                bag(ids)
            with pytest.raises(ValueError, match="offsets must be None"):
                bag(grid, offsets)
            with pytest.raises(ValueError, match="start at 0"):
                bag(ids, torch.tensor([1, 3]))
        bag.train()
        bag(ids, offsets).sum().backward()
    assert job.wait_master() == 0, job.log("master")
    two_features = local_job(job_config("python_bag_two"))
    with tessera.init(master=two_features.address, insecure=True) as other:
        with pytest.raises(ValueError, match="one pooled feature"):
            tt.EmbeddingBag(other)
        emb = tt.RemoteEmbeddings(other)
        F = len(emb.features)
        sum(o.sum() for o in emb(tt.KeyedJaggedTensor(emb.features, torch.zeros(F, dtype=torch.int64),
                                                      torch.ones(F, dtype=torch.int32))).values()).backward()


def test_a_checkpoint_keeps_the_trainers_state_and_a_resumed_job_starts_from_it(tmp_path, local_job):
    config = job_config("python_checkpoint")
    config["tables"] = [t for t in config["tables"] if t["pooling"] == "SUM"]
    config["checkpoint"] = {"dir": str(tmp_path / "ckpt"), "every_steps": 4, "keep": 3}
    saved = []

    def save_state():
        saved.append(session.step)
        return f"dense state at step {session.step}".encode()

    job = local_job(config, num_ps=2)
    rows_at = {}
    with tessera.init(master=job.address, insecure=True, save_state=save_state) as session:
        emb = tt.RemoteEmbeddings(session)
        train_steps(session, emb, 10, seed=5,
                    between=lambda step: rows_at.__setitem__(step, read_rows(emb, ROWS)) if step == 8 else None)
    assert job.wait_master() == 0, job.log("master")
    assert saved == [4, 8], saved
    # The checkpoint exports as a C++ job's does, its data-parallel table's
    # rows (kept in the trainer state) as the servers' tables.
    out = tmp_path / "export"
    export = subprocess.run([str(BUILD / "master" / "tessera_export"), "--checkpoint", str(tmp_path / "ckpt"),
                             "--format", "npy", "--out", str(out)], capture_output=True, text=True)
    assert export.returncode == 0, export.stdout + export.stderr
    for t in config["tables"]:
        weight = torch.from_numpy(np.load(out / f"tables.{t['name']}.weight.npy"))
        assert torch.equal(weight, rows_at[8][t["feature_names"][0]]), t["name"]

    resumed = local_job(config, num_ps=1, master_flags=["--resume"])  # on another number of servers
    with tessera.init(master=resumed.address, insecure=True) as session:
        assert session.start_step == 8 and session.step == 8
        assert session.start_state == b"dense state at step 8"
        emb = tt.RemoteEmbeddings(session)
        rows = read_rows(emb, ROWS)
        for f in rows:
            assert torch.equal(rows[f], rows_at[8][f]), f
        train_steps(session, emb, 2, seed=6)
    assert resumed.wait_master() == 0, resumed.log("master")


def test_a_checkpoint_with_the_bare_bytes_of_save_state_still_resumes(tmp_path, local_job):
    """Python jobs' checkpoints kept save_state's bytes alone until the
    trainer state became a param file (data-parallel rows beside them): such
    a checkpoint resumes with its bytes, or, for a job with data-parallel
    tables, which it cannot hold, fails with a clear error."""
    for dp in (False, True):
        config = job_config(f"python_bare_state_{int(dp)}")
        config["tables"] = [t for t in config["tables"] if t["pooling"] == "SUM" and
                            t["sharding_type"] in (("table_wise", "data_parallel") if dp else ("table_wise",))]
        d = tmp_path / f"dp{int(dp)}"
        config["checkpoint"] = {"dir": str(d / "ckpt"), "every_steps": 4, "keep": 1}
        job = local_job(config, num_ps=1)
        with tessera.init(master=job.address, insecure=True, save_state=lambda: b"new") as session:
            train_steps(session, tt.RemoteEmbeddings(session), 5, seed=3)
        assert job.wait_master() == 0, job.log("master")
        # Made as such a checkpoint was: the bytes alone, and a manifest
        # from before the trainer state's size and checksum were recorded.
        ckpt = d / "ckpt" / "ckpt-000000000004"
        (ckpt / "trainer.params").write_bytes(b"bare bytes of an older checkpoint")
        manifest = json.loads((ckpt / "manifest.json").read_text())
        del manifest["trainer_state_bytes"], manifest["trainer_state_checksum"]
        (ckpt / "manifest.json").write_text(json.dumps(manifest))
        resumed = local_job(config, num_ps=1, master_flags=["--resume"])
        if not dp:
            with tessera.init(master=resumed.address, insecure=True) as session:
                assert session.start_step == 4
                assert session.start_state == b"bare bytes of an older checkpoint"
                train_steps(session, tt.RemoteEmbeddings(session), 1, seed=4)
            assert resumed.wait_master() == 0, resumed.log("master")
        else:
            with pytest.raises(tessera.TesseraError, match="lacks the rows of the job's data-parallel tables"):
                tessera.init(master=resumed.address, insecure=True)
            assert resumed.wait_master() != 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_prefetch_gives_the_rows_of_a_job_without(local_job, mode):
    # A prefetched lookup of step t+1 waits at the servers until step t is
    # applied (sync), or until this trainer's own push of step t is (async):
    # the rows it brings are the updated ones, bit for bit.
    def train(name, prefetch):
        config = job_config(name)
        config["tables"] = [t for t in config["tables"] if t["pooling"] != "NONE"]
        config["training"]["consistency"] = mode
        job = local_job(config, num_ps=2)
        with tessera.init(master=job.address, insecure=True) as session:
            emb = tt.RemoteEmbeddings(session)
            rng = np.random.default_rng(4)
            batches = [make_kjt(emb.features, [rng.integers(0, 4, size=4).tolist() for _ in emb.features], rng,
                                set()) for _ in range(6)]
            seen = [read_rows(emb, ROWS)]
            for i, kjt in enumerate(batches):
                out = emb(kjt)
                seen.append({f: o.detach().clone() for f, o in out.items()})
                if prefetch and i + 1 < len(batches):
                    emb.prefetch(batches[i + 1])
                sum((o * (i + 1)).sum() for o in out.values()).backward()
            rows = read_rows(emb, ROWS)
        assert job.wait_master() == 0, job.log("master")
        return seen, rows

    plain_seen, plain_rows = train(f"python_{mode}_plain", prefetch=False)
    ahead_seen, ahead_rows = train(f"python_{mode}_prefetch", prefetch=True)
    for step, (a, b) in enumerate(zip(plain_seen, ahead_seen)):
        for f in a:
            assert torch.equal(a[f], b[f]), f"step {step} feature {f}: prefetched lookup saw other rows"
    for f in plain_rows:
        assert torch.equal(plain_rows[f], ahead_rows[f]), f"feature {f}: final rows differ"
    # The steps did change the rows (equal to the start would prove nothing).
    assert any(not torch.equal(plain_seen[0][f], plain_rows[f]) for f in plain_rows)


def test_prefetch_sends_the_next_lookup_early_in_async_jobs(local_job):
    config = job_config("python_prefetch")
    config["tables"] = [t for t in config["tables"] if t["pooling"] != "NONE"]
    config["training"]["consistency"] = "async"
    job = local_job(config, num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        emb = tt.RemoteEmbeddings(session)
        rng = np.random.default_rng(3)
        batches = [make_kjt(emb.features, [rng.integers(0, 4, size=4).tolist() for _ in emb.features], rng, set())
                   for _ in range(6)]
        with pytest.raises(tessera.TesseraError, match="after a training lookup"):
            emb.prefetch(batches[0])
        for i, kjt in enumerate(batches):
            out = emb(kjt)
            if i + 1 < len(batches):
                emb.prefetch(batches[i + 1])
                with pytest.raises(tessera.TesseraError, match="already prefetched"):
                    emb.prefetch(batches[i + 1])
            sum(o.sum() for o in out.values()).backward()
            if i == 2:
                with pytest.raises(tessera.TesseraError, match="not the one prefetched"):
                    emb(batches[0])
                emb.eval()
                with pytest.raises(tessera.TesseraError, match="before an evaluation lookup"):
                    emb(kjt)
                emb.train()
        assert session.step == 6
        # With nothing prefetched, evaluation lookups work again.
        read_rows(emb, ROWS)
    assert job.wait_master() == 0, job.log("master")


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "dlrm_criteo.py")


def dlrm_job(name, steps):
    """The DLRM of examples/dlrm_criteo.py over SUM tables, table-wise,
    row-wise and data-parallel (held by the trainers)."""
    config = job_config(name, steps=steps)
    config["tables"] = [t for t in config["tables"] if t["pooling"] == "SUM" and
                        t["sharding_type"] in ("row_wise", "table_wise", "data_parallel")]
    config["model"] = {"num_dense_features": 4, "bottom_mlp": [8], "top_mlp": [8, 1]}
    config["data"] = {"source": "synthetic", "num_examples": 4096, "ids_per_bag": 2, "zipf": 1.05}
    config["training"].update({"batch_size": 16, "dense_optimizer": {"type": "sgd", "lr": 0.05}})
    return config


def run_two_python_trainers(job, tmp, during=None, cpp=False):
    """examples/dlrm_criteo.py as trainers 0 and 1 of `job` (DDP over Gloo),
    or with cpp=True the C++ trainer; during(metrics_file_of_rank_0) runs
    while they train."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = []
    try:
        for r in range(2):
            log = open(tmp / f"trainer{r}.log", "wb")
            program = [str(BUILD / "trainer" / "tessera_trainer")] if cpp else [sys.executable, EXAMPLE]
            procs.append(subprocess.Popen(
                program + ["--master", job.address, *job.security, "--rank", str(r), "--world", "2",
                           "--metrics_file", str(tmp / f"trainer{r}.jsonl")],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        if during:
            during(tmp / "trainer0.jsonl")
        for r, p in enumerate(procs):
            try:
                code = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                for q in procs:  # the example dumps its Python stacks (faulthandler)
                    if q.poll() is None:
                        q.send_signal(signal.SIGUSR1)
                time.sleep(1)
                code = "hung"
            assert code == 0, (tmp / f"trainer{r}.log").read_text(errors="replace")[-6000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_python_trainers_follow_a_server_added_mid_job_bit_for_bit(tmp_path, local_job):
    """Two PyTorch trainers (DDP) agree on the boundary the master asks for
    when a server joins, and the sync job ends with the tables and losses of
    the same job on one server throughout."""
    config = dlrm_job("python_ddp_add_ps", steps=600)
    (tmp_path / "job.json").write_text(json.dumps(config))
    runs = {}
    for name in ("undisturbed", "added"):
        d = tmp_path / name
        d.mkdir()
        job = local_job(config, num_ps=1, num_trainers=2, master_flags=["--dump_dir", str(d / "dump")])

        def add_server_after_step_100(metrics):
            deadline = time.time() + 60
            while time.time() < deadline:
                if metrics.exists() and len(metrics.read_text().splitlines()) > 100:
                    job.add_server()
                    return
                time.sleep(0.05)
            raise AssertionError("trainer 0 never passed step 100")

        run_two_python_trainers(job, d, add_server_after_step_100 if name == "added" else None)
        assert job.wait_master() == 0, job.log("master")
        runs[name] = (d, (job.tmp / "master.log").read_text(errors="replace"))
    assert "generation 2: 2 parameter server(s)" in runs["added"][1], runs["added"][1][-3000:]
    assert "generation 2" not in runs["undisturbed"][1]
    for r in range(2):
        a = [json.loads(l)["loss"] for l in (runs["undisturbed"][0] / f"trainer{r}.jsonl").read_text().splitlines()]
        b = [json.loads(l)["loss"] for l in (runs["added"][0] / f"trainer{r}.jsonl").read_text().splitlines()]
        assert a == b, f"trainer {r}: losses differ"
    compare = subprocess.run([str(BUILD / "tests" / "tessera_compare_dumps"), "--config",
                              str(tmp_path / "job.json"), "--a", str(runs["undisturbed"][0] / "dump"),
                              "--b", str(runs["added"][0] / "dump"), "--tolerance", "0"],
                             capture_output=True, text=True)
    assert compare.returncode == 0, compare.stdout + compare.stderr


@pytest.mark.parametrize("security", ["insecure", "keys"])
def test_python_trainers_equal_cpp_trainers_with_a_data_parallel_table(tmp_path, local_job, security):
    """The same sync job (a data-parallel table beside sharded ones, 2
    trainers) trained by examples/dlrm_criteo.py and by tessera_trainer:
    every step's loss of each trainer, the tables (the data-parallel one
    from trainer 0's dp.params) and the dense model within 1e-5. With keys
    both sum their dense gradients through sealed collectives (the example's
    DDP through tessera.torch.sealed_allreduce_hook)."""
    config = dlrm_job("python_vs_cpp_dp", steps=150)
    assert any(t["sharding_type"] == "data_parallel" for t in config["tables"])
    (tmp_path / "job.json").write_text(json.dumps(config))
    keys = tmp_path / "keys" if security == "keys" else None
    for name in ("python", "cpp"):
        d = tmp_path / name
        d.mkdir()
        job = local_job(config, num_ps=2, num_trainers=2, master_flags=["--dump_dir", str(d / "dump")], keys=keys)
        run_two_python_trainers(job, d, cpp=name == "cpp")
        assert job.wait_master() == 0, job.log("master")
        assert (d / "dump" / "dp.params").exists(), f"{name}: trainer 0 wrote no dp.params"
    for r in range(2):
        py = [json.loads(l) for l in (tmp_path / "python" / f"trainer{r}.jsonl").read_text().splitlines()]
        cc = [json.loads(l) for l in (tmp_path / "cpp" / f"trainer{r}.jsonl").read_text().splitlines()]
        assert [x["step"] for x in py] == [x["step"] for x in cc] and len(py) == 150
        worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(py, cc))
        print(f"trainer {r}: max |loss(PyTorch) - loss(C++)| = {worst:.3g} over {len(py)} steps")
        assert worst <= 1e-5
    compare = subprocess.run([str(BUILD / "tests" / "tessera_compare_dumps"), "--config", str(tmp_path / "job.json"),
                              "--a", str(tmp_path / "python" / "dump"), "--b", str(tmp_path / "cpp" / "dump"),
                              "--tolerance", "1e-5"], capture_output=True, text=True)
    print(compare.stdout)
    assert compare.returncode == 0, compare.stdout + compare.stderr


def seeded_kill_step(salt, what):
    """A step in [70, 140] from TESSERA_TEST_SEED (and `salt`), printed."""
    import random
    seed = int(os.environ.get("TESSERA_TEST_SEED", "20261204"))
    step = random.Random(seed * 2 + salt).randint(70, 140)
    print(f"seed {seed}: {what} is killed after step {step}")
    return step


def checkpointed_job(local_job, config, d):
    """`config` on 2 servers and 2 trainers in folder d: a checkpoint every
    50 steps into d/ckpt, the shards and dense model dumped into d/dump."""
    config["checkpoint"] = {"dir": str(d / "ckpt"), "every_steps": 50, "keep": 2}
    (d / "job.json").write_text(json.dumps(config))
    return local_job(config, num_ps=2, num_trainers=2, master_flags=["--dump_dir", str(d / "dump")])


def last_loss_of_each_step(*metrics_files):
    """{step: loss} of trainer metrics files, the last record of a step
    winning (steps after a rollback's checkpoint run twice)."""
    losses = {}
    for f in metrics_files:
        if f.exists():
            for rec in map(json.loads, f.read_text().splitlines()):
                losses[rec["step"]] = rec["loss"]
    return losses


def expect_same_run(undisturbed, disturbed, metrics_of_rank):
    """Folders of two runs of one sync job: every step's loss of both
    trainers, and the dumped tables and dense model, equal bit for bit.
    metrics_of_rank(folder, r) lists trainer r's metrics files."""
    for r in range(2):
        a = last_loss_of_each_step(*metrics_of_rank(undisturbed, r))
        b = last_loss_of_each_step(*metrics_of_rank(disturbed, r))
        assert sorted(b) == sorted(a), f"trainer {r}: steps missing"
        assert [a[k] for k in sorted(a)] == [b[k] for k in sorted(a)], f"trainer {r}: losses differ"
    compare = subprocess.run([str(BUILD / "tests" / "tessera_compare_dumps"), "--config", str(undisturbed / "job.json"),
                              "--a", str(undisturbed / "dump"), "--b", str(disturbed / "dump"), "--tolerance", "0"],
                             capture_output=True, text=True)
    assert compare.returncode == 0, compare.stdout + compare.stderr


@pytest.mark.parametrize("consistency", ["sync", "async"])
def test_two_python_trainers_follow_a_rollback_after_a_lost_server(tmp_path, local_job, consistency):
    """A server killed (-9) at a seeded step after the first checkpoint: the
    master rolls the job back to that checkpoint on the other server; both
    PyTorch trainers (DDP) follow it (session.follow_rollback: the dense model
    restored from the checkpoint, the process group built again) and train
    every step to the end. A sync job ends with the tables and losses of an
    undisturbed run, bit for bit (an async one has no single such run)."""
    kill_after = seeded_kill_step(0, "server 1")
    config = dlrm_job("python_ddp_lost_ps", steps=300)
    config["training"]["consistency"] = consistency
    config["runtime"] = {"heartbeat_ms": 100, "peer_timeout_ms": 3000, "connection_loss_ms": 500,
                         "rpc_timeout_ms": 10000, "collective_timeout_ms": 30000}
    runs = {}
    for name in ("undisturbed", "killed"):
        d = tmp_path / name
        d.mkdir()
        job = checkpointed_job(local_job, config, d)

        def kill_a_server(metrics):
            deadline = time.time() + 60
            while time.time() < deadline:
                if metrics.exists() and len(metrics.read_text().splitlines()) > kill_after:
                    job.servers[1].kill()
                    return
                time.sleep(0.02)
            raise AssertionError(f"trainer 0 never passed step {kill_after}")

        run_two_python_trainers(job, d, kill_a_server if name == "killed" else None)
        assert job.wait_master() == 0, job.log("master")
        runs[name] = (d, (job.tmp / "master.log").read_text(errors="replace"))
    assert "rolling back to step" in runs["killed"][1], runs["killed"][1][-3000:]
    assert "rolling back" not in runs["undisturbed"][1]
    for r in range(2):
        log = (runs["killed"][0] / f"trainer{r}.log").read_text(errors="replace")
        assert "the job rolled back to step" in log, log[-3000:]
        lines = (runs["killed"][0] / f"trainer{r}.jsonl").read_text().splitlines()
        steps = len((runs["undisturbed"][0] / f"trainer{r}.jsonl").read_text().splitlines())
        assert len(lines) > steps, f"trainer {r}: no step ran twice"
        assert sorted(last_loss_of_each_step(runs["killed"][0] / f"trainer{r}.jsonl")) == list(range(steps))
    if consistency == "sync":
        expect_same_run(runs["undisturbed"][0], runs["killed"][0], lambda d, r: [d / f"trainer{r}.jsonl"])


@pytest.mark.parametrize("victim,fault", [(0, "kill"), (1, "kill"), (1, "stop")])
def test_a_lost_python_trainer_is_replaced_and_the_job_ends_bit_for_bit(tmp_path, local_job, victim, fault):
    """Trainer `victim` killed (-9), or stopped (SIGSTOP) past the peer
    timeout, at a seeded step of a 2-trainer DDP sync job, and a new process
    of its rank started: the master rolls the job back to the newest
    checkpoint, the survivor follows (its collective with the lost peer
    fails, follow_rollback), the replacement starts there from the
    checkpoint's state, and the job ends with the undisturbed run's tables
    and losses. A stopped trainer woken (SIGCONT) once the job has rolled
    back is fenced: it ends with an error and changes nothing."""
    kill_after = seeded_kill_step(1 + victim + (2 if fault == "stop" else 0), f"trainer {victim}")
    config = dlrm_job("python_ddp_lost_trainer", steps=300)
    config["runtime"] = {"heartbeat_ms": 100, "peer_timeout_ms": 2000, "rpc_timeout_ms": 10000,
                         "collective_timeout_ms": 30000, "trainer_replacement_wait_ms": 60000}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    results = {}
    for name in ("undisturbed", "killed"):
        d = tmp_path / name
        d.mkdir()
        job = checkpointed_job(local_job, config, d)
        procs = {}

        def start(rank, tag):
            log = open(d / f"trainer{rank}{tag}.log", "wb")
            procs[(rank, tag)] = subprocess.Popen(
                [sys.executable, EXAMPLE, "--master", job.address, "--insecure", "--rank", str(rank), "--world", "2",
                 "--metrics_file", str(d / f"trainer{rank}{tag}.jsonl")],
                stdout=log, stderr=subprocess.STDOUT, env=env)

        try:
            start(0, "")
            start(1, "")
            if name == "killed":
                metrics = d / f"trainer{victim}.jsonl"
                deadline = time.time() + 60
                while not (metrics.exists() and len(metrics.read_text().splitlines()) > kill_after):
                    assert time.time() < deadline, f"trainer {victim} never passed step {kill_after}"
                    time.sleep(0.02)
                if fault == "kill":
                    procs[(victim, "")].kill()
                    procs[(victim, "")].wait()
                    start(victim, "b")
                else:
                    procs[(victim, "")].send_signal(signal.SIGSTOP)
                    deadline = time.time() + 30
                    while f"lost trainer {victim}" not in job.log("master"):
                        assert time.time() < deadline, job.log("master")
                        time.sleep(0.05)
                    start(victim, "b")
                    while "rolling back to step" not in job.log("master"):
                        assert time.time() < deadline, job.log("master")
                        time.sleep(0.05)
                    procs[(victim, "")].send_signal(signal.SIGCONT)
            for (rank, tag), p in procs.items():
                if name == "killed" and (rank, tag) == (victim, ""):
                    if fault == "stop":
                        # The woken trainer is no member any more: it ends, with an error.
                        code = p.wait(timeout=120)
                        out = (d / f"trainer{rank}.log").read_text(errors="replace")
                        assert code != 0, out[-3000:]
                    continue
                try:
                    code = p.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    for q in procs.values():
                        if q.poll() is None:
                            q.send_signal(signal.SIGUSR1)  # the example dumps its Python stacks
                    time.sleep(1)
                    code = "hung"
                assert code == 0, (d / f"trainer{rank}{tag}.log").read_text(errors="replace")[-6000:]
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert job.wait_master() == 0, job.log("master")
        results[name] = (d, (job.tmp / "master.log").read_text(errors="replace"))
    assert "rolling back to step" in results["killed"][1], results["killed"][1][-3000:]
    survivor = (results["killed"][0] / f"trainer{1 - victim}.log").read_text(errors="replace")
    assert "the job rolled back to step" in survivor, survivor[-3000:]
    expect_same_run(results["undisturbed"][0], results["killed"][0],
                    lambda d, r: [d / f"trainer{r}.jsonl", d / f"trainer{r}b.jsonl"])
