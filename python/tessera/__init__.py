"""Tessera from Python: a trainer that joins a Tessera job and keeps its
embedding tables on the job's parameter servers, under a PyTorch model.

    import tessera, tessera.torch
    session = tessera.init(master="tcp://HOST:5555", rank=0, world=1, keys="KEYS")
    ebc = tessera.torch.EmbeddingBagCollection(session)
    ...
    session.finish()

The tables, their sharding, tiers and optimizers are the job's (the master's
config); the dense model, its optimizer and its allreduce (DDP over Gloo or
NCCL) stay the user's.

Metrics. `tessera.init(..., metrics_port=9100)` serves Prometheus' text at
`session.metrics_url` (http://127.0.0.1:9100/metrics; 0: any free port) in
the C++ trainer's families and labels (docs/operations.md#prometheus): the
process's memory and CPU, and the steps. The lookups and pushes are
recorded by the session (steps, examples, step time, lookup and push time,
lookup bytes); the loss is the loop's to give, once a step:

    session.record_loss(loss.item() * batch_size, batch_size)   # summed loss, examples

A step counts once the servers take its gradients, which the session learns
at the next training forward or at finish(): a scrape between the two sees
one step fewer. The rest of a step (the model, optimizer, data, allreduce)
is the phase "dense"; "data" and "allreduce" stay 0, and so does the epoch.
"""

import logging

from ._tessera import (Data, Session, TesseraError, better_blas_core, blas_core, blas_threads, dlrm_initial_params,
                       set_blas_threads, share_of_step, steps_per_epoch, write_params)

__all__ = ["Data", "Session", "TesseraError", "better_blas_core", "blas_advice", "blas_core", "blas_threads",
           "dlrm_initial_params", "init", "set_blas_threads", "share_of_step", "steps_per_epoch", "write_params"]


def blas_advice():
    """What to do where OpenBLAS runs its generic kernels on a CPU it does not
    know (Debian 12's on an Emerald Rapids Xeon: a quarter of the speed of its
    AVX-512 ones), or None. OpenBLAS reads OPENBLAS_CORETYPE only as it loads,
    so it must be set before Python starts; scripts/launch_local.sh sets it
    for the trainers it starts. tessera.init logs this as a warning."""
    better = better_blas_core()
    if not better:
        return None
    return (f"OpenBLAS, which Debian's torch runs its matrix products on, uses its generic {blas_core()} kernels "
            f"on this CPU: start this trainer with OPENBLAS_CORETYPE={better} for its {better} kernels (about 4x "
            f"faster matrix products on an AVX-512 Xeon; the C++ trainer and scripts/launch_local.sh do so)")


def init(master, rank=0, world=1, keys=None, insecure=False, register_timeout_s=120.0, save_state=None,
         metrics_port=None, metrics_address=None, host=None):
    """Registers with the master at `master` as trainer `rank` of `world` and
    waits until the job starts (every member registered, the shards made).

    keys: the job's key folder (scripts/make_job_keys.sh); insecure=True runs
    on plain TCP instead, as the job's other members must.
    save_state: called on trainer 0 at each checkpoint; returns bytes (the
    dense model's state, e.g. torch.save into a BytesIO) that a resumed job
    gives back as `session.start_state`.
    metrics_port: serve Prometheus metrics on this port (0: any free one),
    bound before registering: a port in use raises TesseraError and the job
    never sees this trainer. None: no endpoint. metrics_address: where it
    listens (default 127.0.0.1; "0.0.0.0" for every interface). The URL is
    `session.metrics_url`, logged at INFO on the "tessera" logger.
    host: this trainer's address for its peers in the collective that sums
    the gradients of the job's data-parallel tables (default: the interface
    the route to the master takes).
    """
    if keys is None and not insecure:
        raise ValueError("tessera.init: keys=DIR (the job's keys) or insecure=True is required")
    if not isinstance(rank, int) or not isinstance(world, int):
        raise TypeError("tessera.init: rank and world must be ints")
    if metrics_port is not None and (not isinstance(metrics_port, int) or isinstance(metrics_port, bool)):
        raise TypeError(f"tessera.init: metrics_port must be an int or None, not {type(metrics_port).__name__}")
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise ValueError(f"tessera.init: metrics_port {metrics_port} is not a port (0..65535; None: no endpoint)")
    session = Session(master=str(master), rank=rank, world=world, keys=str(keys or ""), insecure=bool(insecure),
                      register_timeout_ms=int(register_timeout_s * 1000), save_state=save_state,
                      metrics_port=-1 if metrics_port is None else metrics_port,
                      metrics_address=str(metrics_address or "127.0.0.1"), host=str(host or ""))
    advice = blas_advice()
    if advice:
        logging.getLogger("tessera").warning("trainer %d: %s", rank, advice)
    if session.metrics_url:
        logging.getLogger("tessera").info("trainer %d serving metrics on %s", rank, session.metrics_url)
    return session
