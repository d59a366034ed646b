#!/usr/bin/python3
# original.py (PyTorch's tutorial "Combining Distributed DataParallel with
# Distributed RPC Framework") with the RemoteModule replaced by a table on
# Tessera's parameter servers: the master and the parameter server are
# Tessera's (tessera_master, tessera_ps), the trainers look the table up
# through tessera.torch.EmbeddingBag, and a plain backward() sends its
# gradients to the server, whose SGD applies them. `diff -u original.py
# with_tessera.py` is the whole change. Needs the build (scripts/build.sh) and
# PYTHONPATH=build/python.
import json
import os
import random
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import tessera
import tessera.torch

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16
EPOCHS = int(os.environ.get("EPOCHS", "100"))
BUILD = os.environ.get("TESSERA_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
MASTER = "tcp://127.0.0.1:29502"
# The table the RemoteModule held, as a Tessera job: the servers apply SGD.
JOB = {"name": "rpc-ddp-tutorial",
       "tables": [{"name": "emb", "num_embeddings": NUM_EMBEDDINGS, "embedding_dim": EMBEDDING_DIM,
                   "feature_names": ["indices"], "pooling": "SUM", "optimizer": {"type": "sgd", "lr": 0.05},
                   "initializer": {"type": "normal", "mean": 0.0, "std": 1.0}}],
       "data": {"source": "synthetic", "num_examples": 1000},
       "training": {"batch_size": 10, "steps": EPOCHS * 10, "consistency": "async"}}


class HybridModel(torch.nn.Module):
    r"""
    The model consists of a sparse part and a dense part.
    1) The dense part is an nn.Linear module that is replicated across all trainers using DistributedDataParallel.
    2) The sparse part is a tessera.torch.EmbeddingBag whose table lives on Tessera's parameter server.
    """

    def __init__(self, remote_emb_module):
        super(HybridModel, self).__init__()
        self.remote_emb_module = remote_emb_module
        self.fc = DDP(torch.nn.Linear(16, 8))

    def forward(self, indices, offsets):
        emb_lookup = self.remote_emb_module.forward(indices, offsets)
        return self.fc(emb_lookup)


def _run_trainer(remote_emb_module, rank):
    r"""
    Each trainer runs a forward pass which involves an embedding lookup on the
    parameter server and running nn.Linear locally. During the backward pass,
    DDP is responsible for aggregating the gradients for the dense part
    (nn.Linear) and distributed autograd ensures gradients updates are
    propagated to the parameter server.
    """

    # Setup the model.
    model = HybridModel(remote_emb_module)

    # The embedding table's optimizer runs on the parameter server (the job's
    # SGD): only the local parameters are ours to step.
    opt = optim.SGD(model.fc.parameters(), lr=0.05)

    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch(rank):
        for _ in range(10):
            num_indices = random.randint(20, 50)
            indices = torch.LongTensor(num_indices).random_(0, NUM_EMBEDDINGS)

            # Generate offsets.
            offsets = []
            start = 0
            batch_size = 0
            while start < num_indices:
                offsets.append(start)
                start += random.randint(1, 10)
                batch_size += 1

            offsets_tensor = torch.LongTensor(offsets)
            target = torch.LongTensor(batch_size).random_(8)
            yield indices, offsets_tensor, target

    # Train for 100 epochs
    for epoch in range(EPOCHS):
        for indices, offsets, target in get_next_batch(rank):
            output = model(indices, offsets)
            loss = criterion(output, target)

            # The backward pass sends the embeddings' gradients to the server
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("Training done for epoch {}".format(epoch))


def run_worker(rank, world_size):
    r"""
    A wrapper function that starts Tessera's master or parameter server, or
    joins the job as a trainer and trains.
    """

    # Rank 2 is master, 3 is ps and 0 and 1 are trainers.
    if rank == 2:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as config:
            json.dump(JOB, config)
            config.flush()
            # Waits until both trainers are done.
            subprocess.run([os.path.join(BUILD, "master", "tessera_master"), "--config", config.name, "--insecure",
                            "--bind", MASTER, "--num_ps", "1", "--num_trainers", "2"], check=True)
    elif rank <= 1:
        # Initialize process group for Distributed DataParallel on trainers.
        dist.init_process_group(
            backend="gloo", rank=rank, world_size=2, init_method="tcp://localhost:29500"
        )

        # Join the Tessera job and train.
        with tessera.init(master=MASTER, rank=rank, world=2, insecure=True) as session:
            remote_emb_module = tessera.torch.EmbeddingBag(session)
            _run_trainer(remote_emb_module, rank)
    else:
        # The parameter server serves until the master ends the job.
        subprocess.run([os.path.join(BUILD, "ps", "tessera_ps"), "--master", MASTER, "--insecure"], check=True)


if __name__ == "__main__":
    # 2 trainers, 1 parameter server, 1 master.
    world_size = 4
    mp.spawn(run_worker, args=(world_size,), nprocs=world_size, join=True)
