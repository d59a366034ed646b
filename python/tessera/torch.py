"""TorchRec-style modules whose tables live on Tessera's parameter servers.

EmbeddingBagCollection(session) takes a KeyedJaggedTensor (this module's or
torchrec's own) and returns a KeyedTensor of pooled embeddings, as TorchRec's
does; EmbeddingCollection returns a JaggedTensor per unpooled feature;
RemoteEmbeddings returns every feature of any job as a dict of tensors.

Forward looks the batch up on the servers and opens the step's context
there; backward sends only the outputs' gradients back (the gradient return
path of distributed autograd: no ids travel again) and the servers' fused
optimizers apply them. No embedding weights live in this process, so the
module has no parameters: give the dense model's to the optimizer and DDP.

One training forward per step, and its backward before the next one: in
sync mode the servers' step barrier waits for every trainer's gradients.
In eval mode, or under torch.no_grad(), lookups read the rows as they are
and change nothing on the servers.
"""

import dataclasses
import enum
from typing import Dict, List, Optional

import numpy as np
import torch

from . import Session
from . import late_weight_grads

# How often several trainers agree whether to stop for a boundary the master
# asked for (a checkpoint on demand, servers joining or leaving): one
# one-float allreduce every this many steps, as the C++ trainers do.
BOUNDARY_CHECK_EVERY = 16

__all__ = [
    "broadcast_module",
    "SealedAllreduce",
    "sealed_allreduce_hook",
    "PoolingType",
    "EmbeddingBagConfig",
    "EmbeddingConfig",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "JaggedTensor",
    "RemoteEmbeddings",
    "EmbeddingBagCollection",
    "EmbeddingCollection",
    "EmbeddingBag",
]


class PoolingType(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"
    NONE = "NONE"


@dataclasses.dataclass
class EmbeddingBagConfig:
    """A table as TorchRec names it. Tessera's tables are the job's (its
    config on the master); given to a module, these are checked against
    them, so that a model and a job that disagree fail at once."""

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: List[str] = dataclasses.field(default_factory=list)
    pooling: PoolingType = PoolingType.SUM


@dataclasses.dataclass
class EmbeddingConfig:
    """An unpooled table (TorchRec's EmbeddingCollection)."""

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: List[str] = dataclasses.field(default_factory=list)


class JaggedTensor:
    """Rows of one feature, one per id: values [N x dim], lengths [B]."""

    def __init__(self, values: torch.Tensor, lengths: torch.Tensor):
        self._values = values
        self._lengths = lengths

    def values(self) -> torch.Tensor:
        return self._values

    def lengths(self) -> torch.Tensor:
        return self._lengths

    def offsets(self) -> torch.Tensor:
        return torch.cat([self._lengths.new_zeros(1), torch.cumsum(self._lengths, 0)])

    def to_dense(self) -> List[torch.Tensor]:
        return list(torch.split(self._values, self._lengths.tolist()))


class KeyedJaggedTensor:
    """TorchRec's sparse batch: for F keys and B examples, lengths [F*B]
    (feature-major: the B lengths of keys[0], then of keys[1], ...), values
    the ids in the same order, weights (optional) one per id."""

    def __init__(self, keys: List[str], values: torch.Tensor, lengths: torch.Tensor,
                 weights: Optional[torch.Tensor] = None):
        self._keys = list(keys)
        self._values = values
        self._lengths = lengths
        self._weights = weights
        if len(self._keys) == 0:
            raise ValueError("KeyedJaggedTensor: no keys")
        if lengths.dim() != 1 or lengths.numel() % len(self._keys) != 0:
            raise ValueError(f"KeyedJaggedTensor: lengths has shape {tuple(lengths.shape)}; expected "
                             f"[keys x batch] = [{len(self._keys)} x B], flat")

    @staticmethod
    def from_lengths_sync(keys, values, lengths, weights=None):
        return KeyedJaggedTensor(keys, values, lengths, weights)

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def lengths(self) -> torch.Tensor:
        return self._lengths

    def weights_or_none(self) -> Optional[torch.Tensor]:
        return self._weights

    def stride(self) -> int:
        return self._lengths.numel() // len(self._keys)


class KeyedTensor:
    """Pooled embeddings of several features side by side: values
    [B x sum(dims)], keys in order, length_per_key their dims. Read as
    TorchRec's KeyedTensor is (keys, values, length_per_key, offset_per_key,
    key_dim, to_dict, kt[key]); torchrec.KeyedTensor.regroup and
    regroup_as_dict take it too."""

    def __init__(self, keys: List[str], length_per_key: List[int], values: torch.Tensor):
        self._keys = list(keys)
        self._length_per_key = list(length_per_key)
        self._values = values

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def length_per_key(self) -> List[int]:
        return self._length_per_key

    def offset_per_key(self) -> List[int]:
        """Where each key's columns start, and the end: [0, d0, d0+d1, ...]."""
        return [0] + np.cumsum(self._length_per_key).tolist()

    def key_dim(self) -> int:
        return 1

    def device(self) -> torch.device:
        return self._values.device

    def to(self, device, non_blocking: bool = False) -> "KeyedTensor":
        return KeyedTensor(self._keys, self._length_per_key, self._values.to(device, non_blocking=non_blocking))

    def _key_indices(self) -> Dict[str, int]:
        # (TorchRec's KeyedTensor.regroup calls it when a group leaves a key out or repeats one.)
        return {k: i for i, k in enumerate(self._keys)}

    def to_dict(self) -> Dict[str, torch.Tensor]:
        return dict(zip(self._keys, torch.split(self._values, self._length_per_key, dim=1)))

    def __getitem__(self, key: str) -> torch.Tensor:
        i = self._key_indices()[key]
        return self._values.narrow(1, sum(self._length_per_key[:i]), self._length_per_key[i])


def _as_numpy(t, dtype, what):
    """A CPU tensor of exactly `dtype` as a numpy array, without a copy when
    it is already contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{what}: expected dtype {dtype}, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{what}: expected a 1-D tensor, got shape {tuple(t.shape)}")
    return t.detach().cpu().contiguous().numpy()


class _Lookup(torch.autograd.Function):
    """Forward: the servers' lookup of the step. Backward: the push of the
    outputs' gradients under the same step, which the servers apply."""

    @staticmethod
    def forward(ctx, anchor, session, keys, batch, lengths, values, weights, shapes):
        outs = session.lookup(keys, batch, lengths, values, weights, inference=False)
        ctx.session = session
        ctx.shapes = [tuple(o.shape) for o in outs]
        return tuple(torch.from_numpy(o) for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        pushed = []
        for g, shape in zip(grads, ctx.shapes):
            if g is None:  # an output the loss does not use
                pushed.append(np.zeros(shape, dtype=np.float32))
            else:
                pushed.append(g.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy())
        ctx.session.push(pushed)
        # A gradient for the anchor (empty): what the node of push_before_weight_grads waits for.
        return (torch.zeros(0),) + (None,) * 7


class RemoteEmbeddings(torch.nn.Module):
    """Every feature of the job, looked up on its servers: forward(kjt)
    returns {feature: tensor}, [B x dim] for a pooled feature and [N x dim]
    (one row per id, in the batch's order) for an unpooled one."""

    def __init__(self, session: Session, tables=None):
        super().__init__()
        if not isinstance(session, Session):
            raise TypeError("the first argument must be a tessera Session (tessera.init)")
        self.session = session
        self.features = list(session.features)
        self.dims = list(session.dims)
        self.pooled = list(session.pooled)
        self.job_tables = session.job["tables"]
        if tables is not None:
            _check_tables(tables, self.job_tables)
        # Not a submodule: the dense model stays the user's (its parameters, DDP, state_dict).
        self._late_weight_layers = []

    def push_before_weight_grads(self, model: torch.nn.Module) -> List[torch.nn.Module]:
        """Makes each training step's push go before the weight gradients
        of `model`'s torch.nn.Linear layers are computed (the C++ trainer's
        early push): the servers apply the step while this trainer computes
        and allreduces those, instead of after. The layers change class, in
        place, to tessera.late_weight_grads.LinearWeightGradAfterPush: the
        same parameters and results, bit for bit. Returns the layers taken;
        call it before wrapping `model` in DDP."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"push_before_weight_grads takes a torch.nn.Module, not {type(model).__name__}")
        taken = late_weight_grads.take_linear_layers(model)
        known = {id(m) for m in self._late_weight_layers}
        self._late_weight_layers.extend(m for m in taken if id(m) not in known)
        return taken

    def prefetch(self, kjt) -> None:
        """Sends the lookup of the next training step's batch now, so that its
        rows travel while this step computes. The servers answer it once this
        step's gradients are applied (sync jobs) or once this trainer's own
        are (async), so it sees what a lookup sent after the push would. The
        next training forward must be of this batch."""
        keys, batch, lengths, values, weights = self._arrays(kjt)
        self._agree_on_boundary()
        self.session.prefetch(keys, batch, lengths, values, weights)

    def _agree_on_boundary(self):
        """Before the next step's lookup is sent: every BOUNDARY_CHECK_EVERY
        steps the trainers tell each other (a one-float sum through the
        session's own collective: sealed in a job with keys, and needing no
        torch.distributed group) whether any has heard the master ask for a
        boundary, and all stop at this step if so. A lone trainer needs no
        agreement (the session stops by itself)."""
        s = self.session
        if s.world == 1 or s.step <= s.start_step or s.step % BOUNDARY_CHECK_EVERY != 0:
            return
        flag = np.array([1.0 if s.boundary_requested else 0.0], dtype=np.float32)
        s.allreduce_sum(flag)
        if flag[0] > 0:
            s.stop_at_next_step()

    def _arrays(self, kjt):
        keys = list(kjt.keys())
        known = set(self.features)
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"the batch has features the job does not: {unknown} (the job's: {self.features})")
        missing = [f for f in self.features if f not in set(keys)]
        if missing:
            raise ValueError(f"the batch lacks features of the job: {missing}")
        if (callable(getattr(kjt, "variable_stride_per_key", None)) and kjt.variable_stride_per_key()
                and len(set(kjt.stride_per_key())) > 1):
            raise ValueError("the KeyedJaggedTensor has a batch size per feature (torchrec's variable batch, "
                             "stride_per_key_per_rank): every feature needs the same batch here")
        lengths = kjt.lengths()
        if isinstance(lengths, torch.Tensor) and lengths.dtype == torch.int64:
            # torchrec's KeyedJaggedTensor: int64 lengths (torch.tensor's default, or made from int64 offsets).
            if lengths.numel() and int(lengths.max()) > torch.iinfo(torch.int32).max:
                raise ValueError(f"lengths: {int(lengths.max())} ids in one bag (at most 2^31 - 1)")
            lengths = lengths.to(torch.int32)
        lengths = _as_numpy(lengths, torch.int32, "lengths")
        values = _as_numpy(kjt.values(), torch.int64, "values")
        w = kjt.weights_or_none()
        weights = None if w is None else _as_numpy(w, torch.float32, "weights")
        return keys, int(kjt.stride()), lengths, values, weights

    def _lookup(self, kjt) -> Dict[str, torch.Tensor]:
        keys, batch, lengths, values, weights = self._arrays(kjt)
        inference = not self.training or not torch.is_grad_enabled()
        if not inference and not self.session.prefetched:
            self._agree_on_boundary()
        if inference:
            outs = [torch.from_numpy(o) for o in
                    self.session.lookup(keys, batch, lengths, values, weights, inference=True)]
        else:
            # The anchor ties the step's node of the layers' weight gradients to the push: it runs after it.
            anchor = late_weight_grads.open_step(self._late_weight_layers)
            outs = _Lookup.apply(anchor, self.session, keys, batch, lengths, values, weights, None)
        # The rows arrive in host memory; a batch on a GPU gets them there (one copy, which autograd's
        # copy back brings the gradients home from).
        device = kjt.values().device
        if device.type != "cpu":
            outs = [o.to(device) for o in outs]
        return dict(zip(self.features, outs))

    def forward(self, kjt) -> Dict[str, torch.Tensor]:
        return self._lookup(kjt)


class EmbeddingBagCollection(RemoteEmbeddings):
    """TorchRec's EmbeddingBagCollection: forward(kjt) -> KeyedTensor of
    every feature's pooled embedding, in the job's feature order."""

    def __init__(self, session: Session, tables=None):
        super().__init__(session, tables)
        unpooled = [f for f, p in zip(self.features, self.pooled) if not p]
        if unpooled:
            raise ValueError(f"features {unpooled} are unpooled (pooling NONE): use EmbeddingCollection or "
                             "RemoteEmbeddings for this job")

    def embedding_bag_configs(self) -> List[EmbeddingBagConfig]:
        """The job's tables, as TorchRec's EmbeddingBagCollection gives its
        own (torchrec.models.dlrm.DLRM reads them)."""
        return [EmbeddingBagConfig(t["num_embeddings"], t["embedding_dim"], t["name"], list(t["feature_names"]),
                                   PoolingType[t["pooling"]]) for t in self.job_tables]

    def forward(self, kjt) -> KeyedTensor:
        outs = self._lookup(kjt)
        values = [outs[f] for f in self.features]
        # (One feature: its output as it is; cat would copy it.)
        return KeyedTensor(self.features, self.dims, values[0] if len(values) == 1 else torch.cat(values, dim=1))


class EmbeddingCollection(RemoteEmbeddings):
    """TorchRec's EmbeddingCollection: forward(kjt) -> {feature:
    JaggedTensor} of the rows of every id (every feature unpooled)."""

    def __init__(self, session: Session, tables=None):
        super().__init__(session, tables)
        pooled = [f for f, p in zip(self.features, self.pooled) if p]
        if pooled:
            raise ValueError(f"features {pooled} are pooled: use EmbeddingBagCollection or RemoteEmbeddings")

    def embedding_configs(self) -> List[EmbeddingConfig]:
        """The job's tables, as TorchRec's EmbeddingCollection gives its own."""
        return [EmbeddingConfig(t["num_embeddings"], t["embedding_dim"], t["name"], list(t["feature_names"]))
                for t in self.job_tables]

    def forward(self, kjt) -> Dict[str, JaggedTensor]:
        outs = self._lookup(kjt)
        keys = list(kjt.keys())
        lengths = kjt.lengths().view(len(keys), -1)
        return {f: JaggedTensor(outs[f], lengths[keys.index(f)]) for f in self.features}


class EmbeddingBag(RemoteEmbeddings):
    """torch.nn.EmbeddingBag's interface over a job with one pooled feature:
    forward(input, offsets=None, per_sample_weights=None) -> [B x dim], with
    input 1-D and offsets (the start of each bag), or 2-D [B x n] (bags of n
    ids) — what a program written for nn.EmbeddingBag (or PyTorch's
    RemoteModule of one) passes."""

    def __init__(self, session: Session):
        super().__init__(session)
        if len(self.features) != 1 or not self.pooled[0]:
            raise ValueError(f"EmbeddingBag needs a job with one pooled feature; this one has {self.features}: use "
                             "EmbeddingBagCollection")

    def forward(self, input, offsets=None, per_sample_weights=None):
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("EmbeddingBag: offsets must be None when input is 2-D (bags of equal length)")
            batch, n = input.shape
            lengths = torch.full((batch,), n, dtype=torch.int32)
            input = input.reshape(-1)
            if per_sample_weights is not None:
                per_sample_weights = per_sample_weights.reshape(-1)
        elif input.dim() == 1:
            if offsets is None or offsets.dim() != 1:
                raise ValueError("EmbeddingBag: a 1-D input needs 1-D offsets (the first id of each bag)")
            ends = torch.cat([offsets[1:], torch.tensor([input.numel()], dtype=offsets.dtype, device=offsets.device)])
            lengths = (ends - offsets).to(torch.int32)
            if (lengths < 0).any() or (offsets.numel() > 0 and offsets[0] != 0):
                raise ValueError("EmbeddingBag: offsets must start at 0 and not decrease")
        else:
            raise ValueError(f"EmbeddingBag: input must be 1-D or 2-D, not {input.dim()}-D")
        kjt = KeyedJaggedTensor(self.features, input.to(torch.int64), lengths, per_sample_weights)
        return self._lookup(kjt)[self.features[0]]


def _check_tables(tables, job_tables):
    """Each given config (ours or torchrec's) must match the job's table of
    its name: size, dim, features and pooling."""
    by_name = {t["name"]: t for t in job_tables}
    for cfg in tables:
        name = getattr(cfg, "name", "")
        if name not in by_name:
            raise ValueError(f"table '{name}' is not in the job (its tables: {sorted(by_name)})")
        t = by_name[name]
        pooling = getattr(cfg, "pooling", None)
        pooling = "NONE" if pooling is None else str(getattr(pooling, "name", pooling)).upper()
        want = {"num_embeddings": t["num_embeddings"], "embedding_dim": t["embedding_dim"],
                "feature_names": list(t["feature_names"]), "pooling": t["pooling"]}
        got = {"num_embeddings": cfg.num_embeddings, "embedding_dim": cfg.embedding_dim,
               "feature_names": list(cfg.feature_names) or [name], "pooling": pooling}
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        if diff:
            raise ValueError(f"table '{name}' differs from the job's: " +
                             ", ".join(f"{k} {g!r} here, {w!r} in the job" for k, (g, w) in diff.items()))


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor's storage as a flat uint8 tensor (a view)."""
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def broadcast_module(module: torch.nn.Module, session: Session, src: int = 0) -> None:
    """Makes every trainer's `module` (its parameters and buffers, of any
    dtype) equal to trainer `src`'s, bit for bit, through the session's own
    collective: sealed in a job with keys, so unlike DDP's broadcast over
    torch's Gloo group no stranger who reaches a trainer can read or replace
    the model. Every trainer calls it with a module of the same layout;
    layouts that differ raise ValueError on every trainer and change nothing.

        ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
        tessera.torch.broadcast_module(model, session)   # what DDP broadcast, again, sealed

    The bytes travel as 16-bit integers held in float32 (exact: src adds its
    values, every other trainer zeros), twice the module's bytes once,
    through host memory for tensors on a GPU."""
    if not isinstance(session, Session):
        raise TypeError("broadcast_module's second argument must be a tessera Session (tessera.init)")
    if not 0 <= src < session.world:
        raise ValueError(f"broadcast_module: src {src} is not a trainer rank (world {session.world})")
    tensors = list(module.parameters()) + list(module.buffers())
    if session.world == 1:
        return
    # First the layout: each trainer puts its own (a digest of every tensor's
    # dtype and shape, and the byte count) in its slot, so a mismatch is
    # named instead of summing arrays of different sizes.
    import hashlib
    layout = repr([(str(t.dtype), tuple(t.shape)) for t in tensors]).encode()
    total = sum(t.numel() * t.element_size() for t in tensors)
    mine = hashlib.sha256(layout).digest()[:8] + total.to_bytes(8, "little")
    slots = np.zeros((session.world, len(mine) // 2), dtype=np.float32)
    slots[session.rank] = np.frombuffer(mine, dtype="<u2")
    session.allreduce_sum(slots)
    theirs = [bytes(row.astype("<u2").tobytes()) for row in slots]
    differ = [r for r in range(session.world) if theirs[r] != theirs[src]]
    if differ:
        def says(r):
            return f"trainer {r}: {int.from_bytes(theirs[r][8:], 'little')} bytes"
        raise ValueError(f"broadcast_module: the trainers' modules differ in layout (dtypes, shapes) from trainer "
                         f"{src}'s ({says(src)}; {', '.join(says(r) for r in differ)})")
    with torch.no_grad():
        packed = np.zeros(total + (total & 1), dtype=np.uint8)
        if session.rank == src:
            at = 0
            for t in tensors:
                r = _raw_bytes(t.detach().cpu().contiguous())
                packed[at:at + r.numel()] = r.numpy()
                at += r.numel()
        words = packed.view("<u2").astype(np.float32)
        session.allreduce_sum(words)
        packed = words.astype("<u2").view(np.uint8)
        at = 0
        for t in tensors:
            n = t.numel() * t.element_size()
            got = torch.from_numpy(packed[at:at + n].copy()).view(t.dtype).reshape(t.shape)
            t.data.copy_(got)  # to the tensor's device, into its own layout
            at += n


class SealedAllreduce:
    """The state of sealed_allreduce_hook: the session whose collective sums
    DDP's gradient buckets, and the thread that runs the sums while the
    backward goes on.

        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(tessera.torch.SealedAllreduce(session),
                               tessera.torch.sealed_allreduce_hook)
    """

    def __init__(self, session, average=True):
        import concurrent.futures
        self.session = session
        # average=False: buckets are summed, not averaged. For a loss already
        # divided by the global batch (as the C++ trainers divide theirs),
        # that is the gradient itself, without a division here and a
        # multiplication back in the training loop: two passes over every
        # bucket less per step.
        self.average = bool(average)
        # One thread: the sums run in the order the hook took their tickets.
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tessera-allreduce")

    def sum_now(self, array, ticket, done):
        """Sums `array` in place at `ticket`'s turn on this thread, then
        calls done(None), or done(exception)."""
        try:
            self.session.allreduce_sum(array, ticket)
        except BaseException as e:  # noqa: BLE001 - handed to the future DDP waits on
            done(e)
            return
        done(None)

    def sum_later(self, array, ticket, done):
        """sum_now on this state's thread."""
        self._thread.submit(self.sum_now, array, ticket, done)


def sealed_allreduce_hook(state, bucket):
    """A DistributedDataParallel communication hook (its state a
    SealedAllreduce) that sums each gradient bucket through the session's
    own collective instead of torch's process group. In a job with keys that
    collective seals every message (AES-GCM, a key derived from the job's
    trainer secret: docs/design.md, "Who may say what"), so the dense
    gradients never cross torch's Gloo connections, which anyone who reaches
    a trainer's port could read or feed. The bucket is averaged as DDP's
    default hook averages it (divided by the world size, then summed), on
    the state's thread while the backward goes on (the last bucket on the
    backward's own thread: nothing is left to overlap it with); or summed,
    with SealedAllreduce(session, average=False). CPU tensors only. DDP's
    process group still carries what DDP sends besides gradients (the
    model's broadcast when DDP is built, which broadcast_module repeats
    sealed, and its buffers' unless broadcast_buffers=False)."""
    if not isinstance(state, SealedAllreduce):
        raise TypeError("sealed_allreduce_hook's state is a tessera.torch.SealedAllreduce(session), not "
                        f"{type(state).__name__}")
    tensor = bucket.buffer()
    if tensor.device.type != "cpu":
        raise ValueError(f"sealed_allreduce_hook sums CPU tensors, not {tensor.device} ones")
    if state.average:
        tensor.div_(state.session.world)
    future = torch.futures.Future()

    def done(error):
        if error is None:
            future.set_result(tensor)
        else:
            future.set_exception(error)

    # The ticket now, in the backward's order, which every trainer shares. The last bucket's sum runs here, on
    # the backward's thread: nothing is left in the backward to overlap it with, and DDP waits for it before
    # the backward returns, so a handoff to the state's thread and back would only cost the main thread CPU
    # (64-75 us a step; bench/README.md). It still runs after the earlier buckets' sums: its ticket comes
    # after theirs.
    run = state.sum_now if bucket.is_last() else state.sum_later
    run(tensor.detach().numpy(), state.session.take_sum_ticket(), done)
    return future


def _make_store_class():
    import datetime
    import torch.distributed as dist

    class Store(dist.Store):
        """torch.distributed's Store over the master's rendezvous store, for
        the program's own process group (DDP's): only the job's trainers
        reach it, over the job's keys, so unlike a TCPStore no port of the
        trainer listens for anyone and no stranger can join or disturb the
        rendezvous. Keys are the program's, apart from Tessera's own.

            store = tessera.torch.Store(session)
            dist.init_process_group("gloo", store=dist.PrefixStore(f"g{session.generation}", store),
                                    rank=session.rank, world_size=session.world)

        set, get (waiting up to `timeout` for a key), add (a counter, atomic
        at the master) and wait are what torch's process groups use; the
        rest raise NotImplementedError."""

        def __init__(self, session, timeout=datetime.timedelta(seconds=300)):
            super().__init__()
            self._session = session
            self._timeout_s = timeout.total_seconds()

        def set(self, key, value):
            self._session.store_set(key, value if isinstance(value, bytes) else str(value).encode())

        def get(self, key):
            return self._session.store_get(key, self._timeout_s)

        def add(self, key, delta):
            return self._session.store_add(key, int(delta))

        def wait(self, keys, timeout=None):
            seconds = self._timeout_s if timeout is None else timeout.total_seconds()
            for key in keys:
                self._session.store_get(key, seconds)

        def _unsupported(self, *args):
            raise NotImplementedError("tessera.torch.Store offers set, get, add and wait")

        check = compare_set = delete_key = num_keys = _unsupported

    return Store


try:
    Store = _make_store_class()
    __all__.append("Store")
except (ImportError, AttributeError):  # a torch without torch.distributed
    pass
