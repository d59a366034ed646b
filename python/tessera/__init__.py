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
"""

from ._tessera import (Data, Session, TesseraError, dlrm_initial_params, share_of_step, steps_per_epoch,
                       write_params)

__all__ = ["Data", "Session", "TesseraError", "dlrm_initial_params", "init", "share_of_step", "steps_per_epoch",
           "write_params"]


def init(master, rank=0, world=1, keys=None, insecure=False, register_timeout_s=120.0, save_state=None):
    """Registers with the master at `master` as trainer `rank` of `world` and
    waits until the job starts (every member registered, the shards made).

    keys: the job's key folder (scripts/make_job_keys.sh); insecure=True runs
    on plain TCP instead, as the job's other members must.
    save_state: called on trainer 0 at each checkpoint; returns bytes (the
    dense model's state, e.g. torch.save into a BytesIO) that a resumed job
    gives back as `session.start_state`.
    """
    if keys is None and not insecure:
        raise ValueError("tessera.init: keys=DIR (the job's keys) or insecure=True is required")
    if not isinstance(rank, int) or not isinstance(world, int):
        raise TypeError("tessera.init: rank and world must be ints")
    return Session(master=str(master), rank=rank, world=world, keys=str(keys or ""), insecure=bool(insecure),
                   register_timeout_ms=int(register_timeout_s * 1000), save_state=save_state)
