#!/usr/bin/python3
"""The DLRM-style model of configs/criteo_dlrm.json, written in PyTorch,
with its embedding tables on Tessera's parameter servers.

One process per trainer, against a running master and servers (the job's
config is the master's: tables, data, batch, steps):

    scripts/launch_local.sh --ps 2 --trainers 0 --config configs/criteo_dlrm.json --run_dir run/py -- --num_trainers 2 &
    examples/dlrm_criteo.py --master $(cat run/py/master.endpoint) --keys run/py/keys --rank 0 --world 2 &
    examples/dlrm_criteo.py --master $(cat run/py/master.endpoint) --keys run/py/keys --rank 1 --world 2

(examples/run_dlrm_criteo.sh does all of that.) It reads the job's data as
the C++ trainers do (tessera.Data: the same Criteo preprocessing, the same
split of each step among trainers), starts from the C++ trainer's initial
weights, sums the dense gradients over trainers with DDP (Gloo), and trainer
0 evaluates on the dev split at the end (log loss and AUC, in the master's
summary as a C++ job's are).

Checkpoints keep the dense model and its optimizer (save_state), a resumed
job starts from them, and so does a job that rolls back: when a server or a
trainer is lost, the session raises, session.follow_rollback() joins the
job's new generation, and the loop restores the model from that checkpoint,
builds its process group again (a peer may be gone, or stuck in a collective
this trainer left) and trains from the checkpoint's step.
"""

import argparse
import ctypes
import ctypes.util
import datetime
import faulthandler
import gc
import io
import json
import os
import signal
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import tessera
import tessera.torch as tt


class DenseDLRM(torch.nn.Module):
    """trainer/dlrm_model.h in PyTorch: bottom MLP (ReLU after every layer)
    on the dense features, concatenated with each feature's pooled
    embedding, top MLP (ReLU between layers) to one logit."""

    def __init__(self, model_config, feature_dims):
        super().__init__()
        sizes = [model_config["num_dense_features"]] + list(model_config["bottom_mlp"])
        self.bottom = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        sizes = [sizes[-1] + sum(feature_dims)] + list(model_config["top_mlp"])
        self.top = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def load_tessera_params(self, params):
        """Takes tessera.dlrm_initial_params' arrays (bottom.i / top.i)."""
        with torch.no_grad():
            for prefix, layers in (("bottom", self.bottom), ("top", self.top)):
                for i, layer in enumerate(layers):
                    layer.weight.copy_(torch.from_numpy(params[f"{prefix}.{i}.weight"]))
                    layer.bias.copy_(torch.from_numpy(params[f"{prefix}.{i}.bias"]))

    def tessera_params(self):
        """The parameters as the C++ trainer names them (dumps, checkpoints)."""
        out = {}
        for prefix, layers in (("bottom", self.bottom), ("top", self.top)):
            for i, layer in enumerate(layers):
                out[f"{prefix}.{i}.weight"] = layer.weight.detach().numpy().copy()
                out[f"{prefix}.{i}.bias"] = layer.bias.detach().numpy().copy()
        return out

    def forward(self, dense, pooled):
        # ReLUs in place: a layer's output is not needed by its backward, and W1 (sync) ran 1.02-1.04x as
        # fast without the ReLUs' new buffers (bench/README.md).
        x = dense
        for layer in self.bottom:
            x = torch.relu_(layer(x))
        # Without dense features (x is B x 0) the embeddings are the top MLP's input as they are: no copy.
        x = pooled if x.shape[1] == 0 else torch.cat([x, pooled], dim=1)
        for i, layer in enumerate(self.top):
            x = layer(x)
            if i + 1 < len(self.top):
                x = torch.relu_(x)
        return x.squeeze(1)


def keep_freed_memory():
    """Keeps the memory of each step's freed tensors in this process. glibc
    gives large freed blocks back to the kernel (unmapped, or trimmed off the
    heap's top), so every step faults the pages of its activations and
    gradients in again, zeroed by the kernel: about 3% of a 2-core machine in
    W1, where the C++ trainer reuses its buffers. The cost: up to 256 MiB
    freed but still held."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    # 32 MiB is the largest mmap threshold glibc takes on 64-bit machines.
    if not (libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 256 << 20)):
        print("warning: mallopt refused the thresholds; freed tensors go back to the kernel", flush=True)


def roc_auc(scores, labels):
    """Mann-Whitney U with ties at their mean rank (trainer/eval_metrics.cc)."""
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = (i + 1 + j) / 2.0
        i = j
    pos = labels[order] > 0.5
    p, n = pos.sum(), len(s) - pos.sum()
    if p == 0 or n == 0:
        return 0.5
    return float((ranks[pos].sum() - p * (p + 1) / 2.0) / (p * n))


def kjt_of(batch):
    w = batch["weights"]
    return tt.KeyedJaggedTensor(batch["keys"], torch.from_numpy(batch["values"]), torch.from_numpy(batch["lengths"]),
                                None if w is None else torch.from_numpy(w))


def evaluate(ebc, model, data):
    ebc.eval()
    model.eval()
    logits, labels = [], []
    with torch.no_grad():
        for begin in range(0, data.num_examples, 4096):
            b = data.read(begin, min(4096, data.num_examples - begin))
            logits.append(model(torch.from_numpy(b["dense"]), ebc(kjt_of(b)).values()).numpy())
            labels.append(b["labels"])
    logits, labels = np.concatenate(logits), np.concatenate(labels)
    log_loss = float(F.binary_cross_entropy_with_logits(torch.from_numpy(logits), torch.from_numpy(labels)))
    return {"examples": int(len(labels)), "log_loss": log_loss, "auc": roc_auc(logits, labels)}


class DenseState:
    """The dense model and its optimizer as checkpoint bytes (the session's
    save_state) and back."""

    def __init__(self):
        self.model = None
        self.opt = None

    def save(self):
        if self.model is None:
            return b""
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict()}, buf)
        return buf.getvalue()

    def restore(self, state, initial):
        """From a checkpoint's bytes; b'' (none taken yet): the initial weights."""
        if state:
            saved = torch.load(io.BytesIO(state))
            self.model.load_state_dict(saved["model"])
            self.opt.load_state_dict(saved["opt"])
        else:
            self.model.load_tessera_params(initial)
            self.opt.state.clear()


class ProcessGroup:
    """The trainers' torch.distributed group, built again for every
    generation of the job: after a rollback a peer may be new, or still
    waiting in a collective of the old group (which fails once this side
    leaves it). The ranks meet in the master's rendezvous store
    (tessera.torch.Store: the job's trainers' alone, over its keys; no
    TCPStore port for anyone to reach), each generation under its own
    prefix."""

    def __init__(self, session):
        self.store = tt.Store(session)
        self.rank, self.world = session.rank, session.world

    def join(self, generation, timeout_s):
        if dist.is_initialized():
            dist.destroy_process_group()
        # The old group's sockets close only once nothing holds it (the caller dropped its DDP): a peer stuck
        # in one of its collectives then fails at once instead of at the timeout.
        gc.collect()
        dist.init_process_group("gloo", store=dist.PrefixStore(f"generation-{generation}", self.store),
                                rank=self.rank, world_size=self.world, timeout=datetime.timedelta(seconds=timeout_s))


def train(session, rank, world, metrics_file=None, log=print, dense_state=None, sealed_ddp=True, early_push=True):
    job = session.job
    training = job["training"]
    ebc = tt.EmbeddingBagCollection(session)
    model = DenseDLRM(job["model"], session.dims)
    if early_push:
        # The servers apply the step while the dense weights' gradients are computed and summed.
        ebc.push_before_weight_grads(model)
    initial = tessera.dlrm_initial_params(job, session.dims)
    opt_config = training.get("dense_optimizer", {"type": "sgd", "lr": 0.1})
    if opt_config["type"] != "sgd":
        raise ValueError(f"this example trains with the dense optimizer 'sgd', not {opt_config['type']!r}")
    opt = torch.optim.SGD(model.parameters(), lr=opt_config["lr"])
    state = dense_state or DenseState()
    state.model, state.opt = model, opt
    state.restore(session.start_state, initial)
    group = ProcessGroup(session) if world > 1 else None

    def dense_of_generation():
        if group is None:
            return model
        # Collectives time out as the C++ trainers' Gloo does (runtime.collective_timeout_ms).
        group.join(session.generation, job.get("runtime", {}).get("collective_timeout_ms", 120000) / 1000.0)
        # The gradients live in DDP's buckets (no copy into a bucket and back each step).
        ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, gradient_as_bucket_view=True)
        if sealed_ddp:
            # The gradients go through the session's collective, sealed in a job with keys, not torch's Gloo;
            # and the model DDP has just broadcast over Gloo is broadcast again through it, so what a
            # stranger might have fed that broadcast is overwritten. Summed, not averaged: each trainer's
            # loss is already divided by the whole global batch, as the C++ trainers divide theirs.
            ddp.register_comm_hook(tt.SealedAllreduce(session, average=False), tt.sealed_allreduce_hook)
            tt.broadcast_module(model, session)
        return ddp

    dense = dense_of_generation()

    data = tessera.Data(job, "train")
    batch = training["batch_size"]
    total = training.get("steps", 0) or training["epochs"] * tessera.steps_per_epoch(world, batch, data.num_examples)
    metrics = open(metrics_file, "w") if metrics_file else None
    # training.prefetch (on unless the job turns it off): the next step's lookup travels while this
    # one computes; the servers answer it once this step is applied (sync) or once this trainer's
    # own push of it is (async).
    prefetch = training.get("prefetch", False)
    start = time.time()
    b = None
    step = session.start_step
    ran = 0  # steps trained here, a rollback's replayed ones included
    while step < total:
        rollback = None
        try:
            t0 = time.time()
            share = tessera.share_of_step(step, rank, world, batch, data.num_examples)
            if b is None:
                b = data.read(share["begin"], share["count"])
            pooled = ebc(kjt_of(b)).values()
            following = None
            if prefetch and step + 1 < total:
                nxt = tessera.share_of_step(step + 1, rank, world, batch, data.num_examples)
                following = data.read(nxt["begin"], nxt["count"])
                ebc.prefetch(kjt_of(following))
            logits = dense(torch.from_numpy(b["dense"]), pooled)
            loss_sum = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(b["labels"]), reduction="sum")
            opt.zero_grad()
            (loss_sum / share["global_count"]).backward()  # the embeddings' gradients go to the servers here
        except RuntimeError as e:
            # A tessera.TesseraError (a lost server or trainer), or the collective a peer left when it rolled
            # back. Raised again unless the job rolls back.
            rollback = session.follow_rollback()
            if rollback is None:
                raise
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if rollback is not None:
            # Out of the except block: its traceback held the old DDP, and with it the old group.
            log(f"trainer {rank}: the job rolled back to step {rollback['step']} "
                f"(generation {rollback['generation']}) after {why}")
            dense = pooled = logits = loss_sum = None
            state.restore(rollback["state"], initial)
            dense = dense_of_generation()
            step, b = rollback["step"], None
            continue
        if world > 1 and not sealed_ddp:
            # Each trainer's loss is already divided by the whole global batch (as the C++ trainers do), so the
            # dense gradients are to be summed over trainers; torch's DDP allreduce averaged them. (Exact for a
            # power-of-two world.)
            for p in model.parameters():
                p.grad.mul_(world)
        opt.step()
        n = int(share["count"])
        session.record_loss(float(loss_sum), n)
        if metrics:
            step_s = time.time() - t0
            metrics.write(json.dumps({"step": step, "epoch": share["epoch"], "loss": float(loss_sum) / max(n, 1),
                                      "examples": n, "examples_per_s": n / step_s if step_s > 0 else 0.0,
                                      "step_ms": step_s * 1e3, "generation": session.generation}) + "\n")
        if (step + 1) % training.get("log_every", 100) == 0 or step + 1 == total:
            log(f"trainer {rank} step {step + 1}/{total} loss {float(loss_sum) / max(n, 1):.5f}")
        b = following
        step += 1
        ran += 1
    seconds = time.time() - start
    if metrics:
        metrics.close()
    result = {"steps": ran, "seconds": seconds}
    if rank == 0 and job["data"].get("eval_path"):
        result["eval"] = evaluate(ebc, model, tessera.Data(job, "eval"))
        log(f"trainer 0: eval {json.dumps(result['eval'])}")
    if rank == 0 and session.dump_dir:
        # The dense model beside the servers' shards (tessera_master --dump_dir), named as the C++ trainer names it.
        os.makedirs(session.dump_dir, exist_ok=True)
        tessera.write_params(os.path.join(session.dump_dir, "dense.params"), model.tessera_params())
    if world > 1:
        dist.destroy_process_group()
    return result, model


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--master", required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--keys", help="the job's key folder")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--ddp_allreduce", choices=["tessera", "torch"], default="tessera",
                   help="how DDP sums the dense gradients: through the session's collective, sealed in a job with keys "
                        "(tessera.torch.sealed_allreduce_hook), or torch's own Gloo allreduce, unencrypted")
    p.add_argument("--push_at_end", action="store_true",
                   help="push the embeddings' gradients after the whole backward, not before the dense weights' "
                        "gradients are computed (tessera.torch's push_before_weight_grads): for comparison")
    p.add_argument("--metrics_file", help="per-step metrics as JSON lines")
    p.add_argument("--metrics_port", type=int, default=None,
                   help="serve Prometheus metrics on this port, as the C++ trainer's flag (0: any free port)")
    p.add_argument("--metrics_address", default=None, help="where the metrics endpoint listens (127.0.0.1)")
    p.add_argument("--blas_threads", type=int, default=1,
                   help="threads for the dense layers, torch's and OpenBLAS's (1, as the C++ trainer's flag: trainers "
                        "share the host's cores)")
    args = p.parse_args()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 prints where every thread is
    if args.blas_threads < 1:
        p.error("--blas_threads must be >= 1")
    torch.set_num_threads(args.blas_threads)
    # torch.set_num_threads does not reach Debian's pthread OpenBLAS, which torch's matrix products run on: left at
    # one thread per core, its idle workers spin in sched_yield on the cores the other trainers and servers need
    # (a sixth of this 2-core machine in W1, by perf).
    tessera.set_blas_threads(args.blas_threads)
    keep_freed_memory()
    dense_state = DenseState()
    with tessera.init(master=args.master, rank=args.rank, world=args.world, keys=args.keys,
                      insecure=args.insecure, metrics_port=args.metrics_port,
                      metrics_address=args.metrics_address, save_state=dense_state.save) as session:
        if session.metrics_url:
            print(f"trainer {args.rank}: metrics at {session.metrics_url}", flush=True)
        result, _ = train(session, args.rank, args.world, args.metrics_file,
                          dense_state=dense_state, sealed_ddp=args.ddp_allreduce == "tessera",
                          early_push=not args.push_at_end)
        session.finish(eval=result.get("eval"))


if __name__ == "__main__":
    main()
