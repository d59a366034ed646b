"""tessera.torch takes TorchRec's own classes, on a real job (master and 2
parameter servers on 127.0.0.1): torchrec's EmbeddingBagConfig and
EmbeddingConfig are checked against the job's tables; a batch given as
torchrec's KeyedJaggedTensor (lengths int32 or int64, or offsets; weighted)
gives the same outputs, bit for bit, and the same updates of the rows as
the same batch given as tessera.torch.KeyedJaggedTensor; the output reads as
torchrec's KeyedTensor does; torchrec's DLRM trains over the servers' tables.

Skipped where torchrec is not installed (Debian's python3). Run with an
interpreter that has it (../shared/peers/README.md):
    TESSERA_TORCHREC_PYTHON=trvenv/bin/python python/tests/run_pytest.sh build /usr/bin/python3
"""

import numpy as np
import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is not installed in this interpreter")

import torch  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TrecKJT  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedTensor as TrecKT  # noqa: E402

import tessera  # noqa: E402
import tessera.torch as tt  # noqa: E402
from conftest import read_rows  # noqa: E402

ROWS = 24
LR = 0.5
DIM = 8


def table(name, sharding, pooling, dim=DIM, features=None):
    return {"name": name, "num_embeddings": ROWS, "embedding_dim": dim,
            "feature_names": features or [name + "_f"], "sharding_type": sharding, "pooling": pooling,
            "optimizer": {"type": "sgd", "lr": LR}, "initializer": {"type": "uniform", "low": -0.1, "high": 0.1}}


def job_config(name, tables):
    return {"name": name, "tables": tables,
            "model": {"num_dense_features": 2, "bottom_mlp": [4], "top_mlp": [4, 1]},
            "data": {"source": "synthetic", "num_examples": 64, "ids_per_bag": 2},
            "training": {"batch_size": 5, "steps": 8, "consistency": "sync", "seed": 3, "log_every": 1},
            "runtime": {"heartbeat_ms": 200, "peer_timeout_ms": 3000, "rpc_timeout_ms": 5000}}


# Pooled: one table of each sharding, SUM and MEAN; "weighted" gets weights.
POOLED = [table("sum", "table_wise", "SUM"), table("mean", "row_wise", "MEAN"),
          table("weighted", "column_wise", "SUM"), table("both", "table_row_wise", "SUM")]
UNPOOLED = [table("seq", "table_wise", "NONE", dim=4), table("seq_rows", "row_wise", "NONE", dim=6)]


def batch(features, step, weighted=()):
    """A fixed random batch of 5 examples: bags of 0..3 ids (one empty at
    least), per-id weights (1 where the feature is not weighted)."""
    rng = np.random.default_rng(100 + step)
    lengths, values, weights = [], [], []
    for f in features:
        lens = [0] + rng.integers(0, 4, size=4).tolist()
        for n in lens:
            lengths.append(n)
            values += rng.integers(0, ROWS, size=n).tolist()
            weights += (rng.uniform(0.5, 1.5, size=n) if f in weighted else np.ones(n)).tolist()
    return (torch.tensor(values, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int32),
            torch.tensor(weights, dtype=torch.float32))


def as_tessera(features, values, lengths, weights):
    return tt.KeyedJaggedTensor(features, values, lengths, weights)


def as_torchrec(features, values, lengths, weights, form):
    """The same batch as torchrec's KeyedJaggedTensor, made the ways torchrec
    users make it."""
    if form == "lengths_int64":  # torch.tensor's default dtype, as in TorchRec's tutorials
        return TrecKJT(keys=features, values=values, lengths=lengths.to(torch.int64), weights=weights)
    if form == "offsets":
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths.to(torch.int64), 0)])
        return TrecKJT(keys=features, values=values, offsets=offsets, weights=weights)
    assert form == "from_lengths_sync"
    return TrecKJT.from_lengths_sync(keys=features, values=values, lengths=lengths, weights=weights)


FORMS = ["lengths_int64", "offsets", "from_lengths_sync"]


def train(local_job, config, make_module, kind, outputs_of):
    """A fresh job of `config`; one training step per form of FORMS, the
    batch given as `kind` ("tessera" or "torchrec"), the loss the outputs
    times fixed random tensors. Returns the outputs of each step and the rows
    after it."""
    job = local_job(config, num_ps=2)
    steps = []
    with tessera.init(master=job.address, insecure=True) as session:
        module = make_module(session)
        features = module.features
        first = read_rows(module, ROWS)
        for step, form in enumerate(FORMS):
            values, lengths, weights = batch(features, step, weighted={"weighted_f"})
            kjt = (as_tessera(features, values, lengths, weights) if kind == "tessera"
                   else as_torchrec(features, values, lengths, weights, form))
            outs = outputs_of(module(kjt))
            g = torch.Generator().manual_seed(step)
            loss = sum((o * torch.randn(o.shape, generator=g)).sum() for o in outs.values())
            loss.backward()
            steps.append(({f: o.detach().clone() for f, o in outs.items()}, read_rows(module, ROWS)))
        assert session.step == len(FORMS)
    assert job.wait_master() == 0, job.log("master")
    return first, steps


def assert_same_steps(a, b):
    first_a, steps_a = a
    first_b, steps_b = b
    for f in first_a:
        assert torch.equal(first_a[f], first_b[f]), f"{f}: the two jobs do not start from the same rows"
    for step, ((outs_a, rows_a), (outs_b, rows_b)) in enumerate(zip(steps_a, steps_b)):
        where = f"step {step} ({FORMS[step]})"
        assert outs_a.keys() == outs_b.keys(), where
        for f in outs_a:
            assert torch.equal(outs_a[f], outs_b[f]), f"{where}: {f}'s outputs differ"
            assert torch.equal(rows_a[f], rows_b[f]), f"{where}: {f}'s rows after the step differ"
    for f in first_a:  # The steps did update every table.
        assert (steps_a[-1][1][f] - first_a[f]).abs().max().item() > 1e-3, f


def test_torchrec_configs_are_checked_against_the_job(local_job):
    job = local_job(job_config("torchrec_configs", POOLED), num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        right = [torchrec.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name=t["name"],
                                             feature_names=t["feature_names"],
                                             pooling=torchrec.PoolingType[t["pooling"]]) for t in POOLED]
        ebc = tt.EmbeddingBagCollection(session, tables=right)
        assert ebc.features == [t["feature_names"][0] for t in POOLED]
        # Its configs, as torchrec's EmbeddingBagCollection gives them.
        assert [(c.name, c.num_embeddings, c.embedding_dim, c.feature_names, c.pooling.name)
                for c in ebc.embedding_bag_configs()] == \
            [(c.name, c.num_embeddings, c.embedding_dim, c.feature_names, c.pooling.name) for c in right]

        def refused(cfg, match):
            with pytest.raises(ValueError, match=match):
                tt.EmbeddingBagCollection(session, tables=[cfg])

        refused(torchrec.EmbeddingBagConfig(ROWS + 1, DIM, "sum", feature_names=["sum_f"]),
                "table 'sum' differs from the job's: num_embeddings 25 here, 24 in the job")
        refused(torchrec.EmbeddingBagConfig(ROWS, 16, "sum", feature_names=["sum_f"]),
                "embedding_dim 16 here, 8 in the job")
        refused(torchrec.EmbeddingBagConfig(ROWS, DIM, "sum", feature_names=["other_f"]),
                r"feature_names \['other_f'\] here, \['sum_f'\] in the job")
        refused(torchrec.EmbeddingBagConfig(ROWS, DIM, "sum", feature_names=["sum_f"],
                                            pooling=torchrec.PoolingType.MEAN),
                "pooling 'MEAN' here, 'SUM' in the job")
        refused(torchrec.EmbeddingConfig(ROWS, DIM, "sum", feature_names=["sum_f"]),
                "pooling 'NONE' here, 'SUM' in the job")
        refused(torchrec.EmbeddingBagConfig(ROWS, DIM, "nope", feature_names=["nope_f"]),
                r"table 'nope' is not in the job \(its tables: \['both', 'mean', 'sum', 'weighted'\]\)")

    job = local_job(job_config("torchrec_configs_unpooled", UNPOOLED), num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        right = [torchrec.EmbeddingConfig(ROWS, t["embedding_dim"], t["name"], feature_names=t["feature_names"])
                 for t in UNPOOLED]
        ec = tt.EmbeddingCollection(session, tables=right)
        assert [(c.name, c.embedding_dim, c.feature_names) for c in ec.embedding_configs()] == \
            [(c.name, c.embedding_dim, c.feature_names) for c in right]
        with pytest.raises(ValueError, match="embedding_dim 4 here, 6 in the job"):
            tt.EmbeddingCollection(session, tables=[torchrec.EmbeddingConfig(ROWS, 4, "seq_rows",
                                                                             feature_names=["seq_rows_f"])])
        with pytest.raises(ValueError, match="pooling 'SUM' here, 'NONE' in the job"):
            tt.EmbeddingCollection(session, tables=[torchrec.EmbeddingBagConfig(ROWS, 4, "seq",
                                                                                feature_names=["seq_f"])])


def test_a_torchrec_kjt_gives_the_pooled_values_and_updates_of_a_tessera_kjt(local_job):
    config = job_config("torchrec_kjt_pooled", POOLED)

    def outputs_of(kt):
        assert isinstance(kt, tt.KeyedTensor)
        return kt.to_dict()

    ours = train(local_job, config, tt.EmbeddingBagCollection, "tessera", outputs_of)
    theirs = train(local_job, config, tt.EmbeddingBagCollection, "torchrec", outputs_of)
    assert_same_steps(ours, theirs)


def test_a_torchrec_kjt_gives_the_rows_and_updates_of_a_tessera_kjt_unpooled(local_job):
    config = job_config("torchrec_kjt_unpooled", UNPOOLED)
    lengths_seen = []

    def outputs_of(jts):
        lengths_seen.append({f: jt.lengths().tolist() for f, jt in jts.items()})
        return {f: jt.values() for f, jt in jts.items()}

    ours = train(local_job, config, tt.EmbeddingCollection, "tessera", outputs_of)
    theirs = train(local_job, config, tt.EmbeddingCollection, "torchrec", outputs_of)
    assert_same_steps(ours, theirs)
    assert lengths_seen[:len(FORMS)] == lengths_seen[len(FORMS):]


def test_keys_in_another_order_and_bad_torchrec_batches(local_job):
    job = local_job(job_config("torchrec_kjt_order", POOLED), num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        ebc = tt.EmbeddingBagCollection(session)
        features = ebc.features
        values, lengths, weights = batch(features, 0, weighted={"weighted_f"})
        ebc.eval()
        with torch.no_grad():
            expected = ebc(as_tessera(features, values, lengths, weights)).to_dict()
            # The same batch, its features in reverse order: the output keeps the job's order.
            per_feature = list(zip(features, torch.split(values, lengths.view(len(features), -1).sum(1).tolist()),
                                   torch.split(weights, lengths.view(len(features), -1).sum(1).tolist()),
                                   lengths.view(len(features), -1)))[::-1]
            reordered = TrecKJT(keys=[p[0] for p in per_feature], values=torch.cat([p[1] for p in per_feature]),
                                weights=torch.cat([p[2] for p in per_feature]),
                                lengths=torch.cat([p[3] for p in per_feature]).to(torch.int64))
            kt = ebc(reordered)
            assert kt.keys() == features
            for f in features:
                assert torch.equal(kt[f], expected[f]), f
            # torchrec's variable batch per feature: the same batch size for
            # every feature given that way is taken; different ones are
            # refused, and it says why.
            vbe = TrecKJT(keys=features, values=values, lengths=lengths, weights=weights,
                          stride_per_key_per_rank=[[5]] * len(features))
            assert vbe.variable_stride_per_key()
            assert torch.equal(ebc(vbe).values(), ebc(as_tessera(features, values, lengths, weights)).values())
            vbe = TrecKJT(keys=features, values=torch.zeros(int(lengths[:-1].sum()), dtype=torch.int64),
                          lengths=lengths[:-1], stride_per_key_per_rank=[[5]] * (len(features) - 1) + [[4]])
            with pytest.raises(ValueError, match="batch size per feature"):
                ebc(vbe)
            with pytest.raises(TypeError, match="values: expected dtype torch.int64, got torch.int32"):
                ebc(TrecKJT(keys=features, values=values.to(torch.int32), lengths=lengths))
    assert job.wait_master() == 0, job.log("master")


def test_the_output_reads_as_torchrecs_keyed_tensor(local_job):
    job = local_job(job_config("torchrec_keyed_tensor", POOLED), num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        ebc = tt.EmbeddingBagCollection(session)
        features = ebc.features
        first = read_rows(ebc, ROWS)
        values, lengths, weights = batch(features, 0, weighted={"weighted_f"})
        kt = ebc(as_torchrec(features, values, lengths, weights, "lengths_int64"))
        ref = TrecKT(keys=features, length_per_key=[DIM] * len(features), values=kt.values().detach())
        assert kt.keys() == ref.keys() == features
        assert kt.values().shape == (5, DIM * len(features)) and kt.values().requires_grad
        assert kt.length_per_key() == ref.length_per_key()
        assert kt.offset_per_key() == ref.offset_per_key()
        assert kt.key_dim() == ref.key_dim() and kt.device() == ref.device()
        assert list(kt.to_dict()) == list(ref.to_dict()) == features
        for f in features:
            assert torch.equal(kt.to_dict()[f], ref.to_dict()[f]), f
            assert torch.equal(kt[f], ref[f]), f
        assert torch.equal(kt.to("cpu").values(), kt.values())
        # torchrec's regroup: all keys once (its fbgemm path), and a subset (its other path).
        for groups in ([features[2:], features[:2]], [[features[1]], [features[0], features[1]]]):
            got = TrecKT.regroup([kt], groups)
            want = TrecKT.regroup([ref], groups)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert torch.equal(g.detach(), w), groups
        as_dict = TrecKT.regroup_as_dict([kt], [features[:1], features[1:]], ["a", "b"])
        assert as_dict["b"].shape == (5, DIM * 3)
        # Gradients flow back through torchrec's regroup to the servers, each
        # feature's to its own rows: "sum" (features[0], in the second group)
        # gets twice its id counts.
        group_a, group_b = TrecKT.regroup([kt], [features[2:], features[:2]])
        (group_a.sum() + 2 * group_b.sum()).backward()
        assert session.step == 1
        after = read_rows(ebc, ROWS)
        n_sum = int(lengths[:5].sum())
        counts = torch.bincount(values[:n_sum], minlength=ROWS).to(torch.float32)
        expected = first["sum_f"] - LR * 2 * counts[:, None].expand(ROWS, DIM)
        assert (after["sum_f"] - expected).abs().max().item() <= 1e-6
        for f in features:
            assert (after[f] - first[f]).abs().max().item() > 0, f
        kt = ebc(as_torchrec(features, values, lengths, weights, "offsets"))
        TrecKT.regroup_as_dict([kt], [features], ["all"])["all"].sum().backward()
        assert session.step == 2
    assert job.wait_master() == 0, job.log("master")


def test_torchrecs_dlrm_trains_over_the_servers_tables(local_job):
    """torchrec.models.dlrm.DLRM, given tessera's EmbeddingBagCollection in
    place of its own: its SparseArch reads embedding_bag_configs() and the
    output's to_dict(); the dense arches are its own modules."""
    from torchrec.models.dlrm import DLRM
    tables = [t for t in POOLED if t["name"] != "weighted"]
    job = local_job(job_config("torchrec_dlrm", tables), num_ps=2)
    with tessera.init(master=job.address, insecure=True) as session:
        torch.manual_seed(0)
        ebc = tt.EmbeddingBagCollection(session)
        model = DLRM(embedding_bag_collection=ebc, dense_in_features=2, dense_arch_layer_sizes=[8, DIM],
                     over_arch_layer_sizes=[8, 1])
        assert list(ebc.parameters()) == []
        params = list(model.parameters())
        assert params, "DLRM's dense arches have parameters"
        opt = torch.optim.SGD(params, lr=0.1)
        features = ebc.features
        first = read_rows(ebc, ROWS)
        dense_before = [p.detach().clone() for p in params]
        rng = np.random.default_rng(9)
        for step in range(4):
            values, lengths, _ = batch(features, step)
            kjt = TrecKJT(keys=features, values=values, lengths=lengths.to(torch.int64))
            dense = torch.tensor(rng.normal(size=(5, 2)), dtype=torch.float32)
            labels = torch.tensor(rng.integers(0, 2, size=5), dtype=torch.float32)
            logits = model(dense, kjt).squeeze(-1)
            assert logits.shape == (5,)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert np.isfinite(loss.item())
        assert session.step == 4
        last = read_rows(ebc, ROWS)
        for f in features:
            assert (last[f] - first[f]).abs().max().item() > 0, f"{f}: the servers' rows did not move"
        assert any((p.detach() - b).abs().max().item() > 0 for p, b in zip(params, dense_before))
        # In eval mode the sparse arch reads the rows without a step.
        model.eval()
        with torch.no_grad():
            values, lengths, _ = batch(features, 0)
            kjt = TrecKJT(keys=features, values=values, lengths=lengths)
            emb = model.sparse_arch(kjt)
            kt = ebc(kjt)
        assert emb.shape == (5, len(features), DIM)
        assert torch.equal(emb, torch.stack([kt[f] for f in features], dim=1))
        assert session.step == 4
    assert job.wait_master() == 0, job.log("master")
