"""RemoteEmbeddings.push_before_weight_grads on a real job: the step's push
goes before the dense weights' gradients are computed, and the model's
outputs and gradients (the pushed ones too) are torch.nn.Linear's bit for
bit."""

import copy

import numpy as np
import pytest
import torch

import tessera
import tessera.torch as tt

DIM = 4


def job_config():
    tables = [{"name": f"t{i}", "num_embeddings": 50, "embedding_dim": DIM, "feature_names": [f"f{i}"],
               "sharding_type": sharding, "pooling": "SUM", "optimizer": {"type": "sgd", "lr": 0.1},
               "initializer": {"type": "uniform", "low": -0.5, "high": 0.5}}
              for i, sharding in enumerate(["table_wise", "row_wise"])]
    return {"name": "late_weight_grads", "tables": tables,
            "model": {"num_dense_features": 0, "top_mlp": [8, 1]},
            "data": {"source": "synthetic", "num_examples": 64, "ids_per_bag": 2},
            "training": {"batch_size": 8, "steps": 4, "consistency": "sync", "seed": 3, "log_every": 1},
            "runtime": {"heartbeat_ms": 200, "peer_timeout_ms": 3000, "rpc_timeout_ms": 5000}}


def batch(step):
    rng = np.random.default_rng(step)
    lengths = rng.integers(0, 4, size=2 * 8)
    values = rng.integers(0, 50, size=int(lengths.sum()))
    return tt.KeyedJaggedTensor(["f0", "f1"], torch.from_numpy(values.astype(np.int64)),
                                torch.from_numpy(lengths.astype(np.int32)))


def mlp():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(2 * DIM, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


@pytest.fixture
def pushes(monkeypatch):
    """Records, in one list with the weights' gradient hooks, when each push
    happens and what it sends."""
    events = []
    backward = tt._Lookup.backward

    def recorded(ctx, *grads):
        events.append(("push", [g.detach().clone() for g in grads]))
        return backward(ctx, *grads)

    monkeypatch.setattr(tt._Lookup, "backward", staticmethod(recorded))
    return events


def train_step(ebc, model, step, events):
    for name, p in model.named_parameters():
        p.grad = None
    hooks = [p.register_hook(lambda g, name=name: events.append((name, None))) for name, p in model.named_parameters()]
    pooled = ebc(batch(step)).values()
    loss = (model(pooled).squeeze(1) ** 2).sum()
    loss.backward()
    for h in hooks:
        h.remove()
    return pooled.detach(), float(loss)


@pytest.mark.parametrize("early", [True, False])
def test_the_push_goes_before_the_weight_gradients_and_changes_no_bit(local_job, pushes, early):
    job = local_job(job_config(), num_ps=2)
    with tessera.init(master=job.address, rank=0, world=1, insecure=True) as session:
        check_steps(session, early, pushes)
    assert job.wait_master() == 0, job.log("master")


def check_steps(session, early, pushes):
    ebc = tt.EmbeddingBagCollection(session)
    model, twin = mlp(), mlp()
    if early:
        taken = ebc.push_before_weight_grads(model)
        assert taken == [model[0], model[2]]
        assert isinstance(model[0], torch.nn.Linear)
    for step in range(3):
        pushes.clear()
        pooled, loss = train_step(ebc, model, step, pushes)
        order = [name for name, _ in pushes]
        weights_at = [order.index(n) for n in ("0.weight", "2.weight")]
        assert sorted(order) == sorted(["push", "0.weight", "0.bias", "2.weight", "2.bias"]), order
        if early:
            assert all(order.index("push") < i for i in weights_at), order
        else:  # without: the push waits for every weight's gradient (what the early push removes)
            assert all(order.index("push") > i for i in weights_at), order
        # The plain model on the same rows: the same loss, gradients and pushed gradients, bit for bit.
        x = pooled.clone().requires_grad_()
        twin.zero_grad(set_to_none=True)
        twin_loss = (twin(x).squeeze(1) ** 2).sum()
        twin_loss.backward()
        assert float(twin_loss) == loss
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            assert torch.equal(p.grad, q.grad), (step, name)
        pushed = dict(pushes)["push"]
        assert torch.equal(torch.cat(pushed, dim=1), x.grad)
        with torch.no_grad():
            for p, q in zip(model.parameters(), twin.parameters()):
                p -= 0.05 * p.grad
                q -= 0.05 * q.grad
    # Outside training the layers are plain ones: no lookup, no weight node, the same outputs.
    ebc.eval()
    with torch.no_grad():
        pooled = ebc(batch(9)).values()
        assert torch.equal(model(pooled), twin(pooled))
    x = torch.randn(3, 2 * DIM, requires_grad=True)
    model(x).sum().backward()  # a forward with no lookup before it: torch.nn.Linear's backward
    assert model[0].weight.grad is not None


def test_only_modules_are_taken_and_subclasses_keep_their_forward(local_job):
    job = local_job(job_config(), num_ps=1)
    with tessera.init(master=job.address, rank=0, world=1, insecure=True) as session:
        ebc = tt.EmbeddingBagCollection(session)
        check_taking(ebc)
    assert job.wait_master() == 0, job.log("master")


def check_taking(ebc):
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ebc.push_before_weight_grads([torch.nn.Linear(2, 2)])

    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model = torch.nn.Sequential(Scaled(2 * DIM, 8), torch.nn.Linear(8, 1))
    assert ebc.push_before_weight_grads(model) == [model[1]]
    assert type(model[0]) is Scaled
    assert ebc.push_before_weight_grads(model) == [model[1]]  # twice: taken once
    assert len(ebc._late_weight_layers) == 1


class _FakeLookup(torch.autograd.Function):
    """Stands for the lookup's node: takes the anchor, records its backward
    (the push) in `events`, and gives the anchor its gradient."""

    @staticmethod
    def forward(ctx, anchor, x, events):
        ctx.events = events
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.events.append("push")
        return torch.zeros(0), grad, None


def record_weight_grads(model, events):
    return [p.register_hook(lambda g, name=name: events.append(name))
            for name, p in model.named_parameters() if name.endswith("weight")]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_layers_before_the_lookup_and_accumulated_steps_give_linears_bits(accumulate):
    """Without a job: open_step and _FakeLookup stand for the lookup. A
    bottom layer runs before it, so it finds the node of the step before
    (unused there), which is stale once the optimizer changed the weight;
    with gradients accumulated over two steps it is not. Both give
    nn.Linear's bits, and the top layer's weight gradient comes after the
    push."""
    from tessera import late_weight_grads as lw
    torch.manual_seed(5)
    model = torch.nn.ModuleDict({"bottom": torch.nn.Linear(3, 4), "top": torch.nn.Linear(4 + 5, 1)})
    twin = copy.deepcopy(model)
    layers = lw.take_linear_layers(model)
    assert layers == [model["bottom"], model["top"]]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for step in range(6):
        d = torch.randn(8, 3)
        e = torch.randn(8, 5)
        es = []
        for m, late in ((model, True), (twin, False)):
            leaf = e.clone().requires_grad_()
            h = torch.relu(m["bottom"](d))
            events, x = [], leaf
            if late:
                hooks = record_weight_grads(m, events)
                x = _FakeLookup.apply(lw.open_step(layers), leaf, events)
            (m["top"](torch.cat([h, x * 1.0], 1)) ** 2).sum().backward()
            if late:
                for hook in hooks:
                    hook.remove()
                assert events.index("push") < events.index("top.weight"), events
            es.append(leaf.grad)
        assert torch.equal(es[0], es[1]), step
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            assert torch.equal(p.grad, q.grad), (step, name)
        if (step + 1) % accumulate == 0:
            for o in opts:
                o.step()
                o.zero_grad()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)


def test_layers_without_bias_frozen_biases_in_place_relus_and_a_changed_input():
    """A layer without a bias, one whose bias is frozen, and ReLUs in place
    on the layers' outputs all give nn.Linear's bits, the push first; an
    input changed in place after a layer used it is refused, as torch's own
    linear backward refuses it."""
    from tessera import late_weight_grads as lw
    torch.manual_seed(7)

    def build():
        m = torch.nn.Sequential(torch.nn.Linear(6, 5, bias=False), torch.nn.Linear(5, 4), torch.nn.Linear(4, 1))
        m[1].bias.requires_grad_(False)
        return m

    def forward(m, x):
        return m[2](torch.relu_(m[1](torch.relu_(m[0](x))))).squeeze(1)

    model, twin = build(), build()
    twin.load_state_dict(model.state_dict())
    layers = lw.take_linear_layers(model)
    e = torch.randn(8, 6)
    events = []
    hooks = record_weight_grads(model, events)
    x = _FakeLookup.apply(lw.open_step(layers), e.clone().requires_grad_(), events)
    (forward(model, x) ** 2).sum().backward()
    for hook in hooks:
        hook.remove()
    assert events[0] == "push" and sorted(events[1:]) == ["0.weight", "1.weight", "2.weight"], events
    x2 = e.clone().requires_grad_()
    (forward(twin, x2) ** 2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        assert p.grad is None or torch.equal(p.grad, q.grad), name
    assert model[1].bias.grad is None

    x = _FakeLookup.apply(lw.open_step(layers), e.clone().requires_grad_(), [])
    h = model[0](x)
    out = model[1](h)
    h.mul_(2)  # after layer 1 used it
    with pytest.raises(RuntimeError, match="modified"):
        out.sum().backward()
