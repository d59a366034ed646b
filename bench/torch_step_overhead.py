#!/usr/bin/python3
"""What tessera.torch adds to a PyTorch training step's own work, without a
job: the main thread's CPU per step of a tiny model (4 examples, layers of
8: the matrix products cost next to nothing, so what is left is the
frameworks' per-step work), in one process, the variants alternating.

  plain   DDP (world 1) with torch's allreduce, nn.Linear layers
  sealed  DDP with tessera.torch.sealed_allreduce_hook (a session whose
          sum does nothing: what is measured is the hook's own cost)
  early   sealed, and push_before_weight_grads' layers and step node, with
          a stand-in for the lookup's node

    PYTHONPATH=build/python bench/torch_step_overhead.py [--rounds 15]

Each variant's figure is the median over rounds of the main thread's CPU
per step (time.thread_time), so other processes' load counts less than in
wall time. The differences are the library's costs per step.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import tessera.torch as tt
from tessera import late_weight_grads


class _NoSumSession:
    """What SealedAllreduce needs of a session: a sum that does nothing."""
    world = 1

    def allreduce_sum(self, array, ticket=None):
        pass

    def take_sum_ticket(self):
        return 0


class _LookupStandIn(torch.autograd.Function):
    """The lookup's node without a job: takes the anchor, gives it a
    gradient."""

    @staticmethod
    def forward(ctx, anchor, rows):
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad):
        return torch.zeros(0), None


def make_step(variant, batch, width):
    torch.manual_seed(0)
    sizes = [width, width, width, 1]
    model = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(inplace=True),
                                torch.nn.Linear(sizes[1], sizes[2]), torch.nn.ReLU(inplace=True),
                                torch.nn.Linear(sizes[2], sizes[3]))
    layers = late_weight_grads.take_linear_layers(model) if variant == "early" else []
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, gradient_as_bucket_view=True)
    if variant != "plain":
        ddp.register_comm_hook(tt.SealedAllreduce(_NoSumSession(), average=False), tt.sealed_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rows = torch.randn(batch, width)
    labels = (torch.rand(batch) > 0.5).float()

    def step():
        anchor = late_weight_grads.open_step(layers)
        pooled = _LookupStandIn.apply(anchor, rows)
        loss = F.binary_cross_entropy_with_logits(ddp(pooled).squeeze(1), labels, reduction="sum")
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=2000, help="steps a variant runs in a round")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--width", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    store = tempfile.mkdtemp()
    dist.init_process_group("gloo", init_method=f"file://{store}/pg", rank=0, world_size=1)
    variants = ["plain", "sealed", "early"]
    steps = {v: make_step(v, args.batch, args.width) for v in variants}
    us = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            for _ in range(100):
                steps[v]()
            t = time.thread_time()
            for _ in range(args.steps):
                steps[v]()
            us[v].append((time.thread_time() - t) / args.steps * 1e6)
    dist.destroy_process_group()
    plain = float(np.median(us["plain"]))
    print(f"main thread's CPU per step, median of {args.rounds} rounds of {args.steps} steps "
          f"(batch {args.batch}, width {args.width}; tessera from {os.path.dirname(tt.__file__)}):")
    for v in variants:
        m = float(np.median(us[v]))
        print(f"  {v:7s} {m:7.1f} us  ({m - plain:+6.1f} us against plain; spread {min(us[v]):.1f}-{max(us[v]):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
