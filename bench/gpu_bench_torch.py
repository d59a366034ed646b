#!/usr/bin/env python3
"""PyTorch on the shapes of tessera_gpu_bench, for comparison.

One JSON line per measurement, the same fields where they mean the same:

  torch_d2d_copy     tensor copy device to device; bytes read plus written
  torch_forward      F.embedding_bag(mode="sum") on a rows x dim float32 table,
                     batch bags of bag ids (no autograd); bytes counted as in
                     tessera_gpu_bench: every id's row read once plus outputs
  torch_backward_adagrad
                     forward with sparse=True, backward, torch.optim.Adagrad
                     .step(): torch's own sparse path. NOTE: plain (per-element)
                     Adagrad, torch has no row-wise Adagrad (that lives in
                     fbgemm_gpu); its state is dim floats per row, not one.
  torch_backward_rowwise_adagrad
                     the same backward, then row-wise Adagrad written with
                     torch ops (coalesce the sparse gradient, one accumulator
                     per row): the closest equivalent of Tessera's step.
For the backward lines, "median_ms" is backward + update: the median of
forward+backward+update minus the median of the same forward with autograd on;
"step_ms" is the whole step.

--ids reads the batch tessera_gpu_bench wrote (--ids_out), so both run the
same ids; without it the same Zipf recipe is drawn here (other random numbers).
"""
import argparse
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F


def median_ms(fn, warmup, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def zipf_ids(rows, s, count, seed):
    cdf = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -s)
    u = np.random.default_rng(seed).random(count) * cdf[-1]
    rank = np.minimum(np.searchsorted(cdf, u, side="right"), rows - 1).astype(np.int64)
    return (rank * 2654435761) % rows


def emit(**fields):
    print(json.dumps(fields), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=65536)
    p.add_argument("--bag", type=int, default=32)
    p.add_argument("--zipf", type=float, default=1.05)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy_bytes", type=int, default=1 << 30)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ids", default="", help="raw int64 ids written by tessera_gpu_bench --ids_out")
    a = p.parse_args()
    if not torch.cuda.is_available():
        emit(bench="torch_skipped", reason="torch sees no CUDA device")
        return 0
    dev = torch.device("cuda:0")
    emit(bench="torch_device", name=torch.cuda.get_device_name(dev), torch=torch.__version__,
         cuda=torch.version.cuda)

    src = torch.ones(a.copy_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), a.warmup, a.iters)
    copy_gbps = 2 * a.copy_bytes / (ms * 1e-3) / 1e9
    emit(bench="torch_d2d_copy", bytes=a.copy_bytes, median_ms=round(ms, 4), gbps_read_plus_write=round(copy_gbps, 1))
    del src, dst

    num_ids = a.batch * a.bag
    if a.ids:
        ids_np = np.fromfile(a.ids, dtype=np.int64)
        if ids_np.size != num_ids:
            sys.exit(f"{a.ids} holds {ids_np.size} ids, expected {num_ids}")
        source = a.ids
    else:
        ids_np = zipf_ids(a.rows, a.zipf, num_ids, a.seed)
        source = "drawn here"
    ids = torch.from_numpy(ids_np).to(dev)
    offsets = torch.arange(a.batch, device=dev, dtype=torch.int64) * a.bag
    weight = torch.empty(a.rows, a.dim, device=dev).uniform_(-0.05, 0.05)

    with torch.no_grad():
        ms = median_ms(lambda: F.embedding_bag(ids, weight, offsets, mode="sum"), a.warmup, a.iters)
    bytes_moved = (num_ids + a.batch) * a.dim * 4
    gbps = bytes_moved / (ms * 1e-3) / 1e9
    emit(bench="torch_forward", ids_from=source, rows=a.rows, dim=a.dim, batch=a.batch, bag=a.bag, zipf=a.zipf,
         median_ms=round(ms, 4), gbps_rows_plus_out=round(gbps, 1), frac_of_copy=round(gbps / copy_gbps, 3),
         ids_per_s=num_ids / (ms * 1e-3))

    param = torch.nn.Parameter(weight)
    grad_out = torch.rand(a.batch, a.dim, device=dev) * 2 - 1
    fwd_ms = median_ms(lambda: F.embedding_bag(ids, param, offsets, mode="sum", sparse=True), a.warmup, a.iters)
    unique_rows = int(torch.unique(ids).numel())

    opt = torch.optim.Adagrad([param], lr=a.lr)

    def adagrad_step():
        F.embedding_bag(ids, param, offsets, mode="sum", sparse=True).backward(grad_out)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step_ms = median_ms(adagrad_step, a.warmup, a.iters)
    emit(bench="torch_backward_adagrad", optimizer="torch.optim.Adagrad (per-element state)", ids=num_ids,
         unique_rows=unique_rows, median_ms=round(step_ms - fwd_ms, 4), step_ms=round(step_ms, 4),
         unique_rows_per_s=unique_rows / ((step_ms - fwd_ms) * 1e-3))
    del opt

    state = torch.zeros(a.rows, device=dev)
    eps = 1e-8

    def rowwise_step():
        F.embedding_bag(ids, param, offsets, mode="sum", sparse=True).backward(grad_out)
        g = param.grad.coalesce()
        rows, vals = g.indices()[0], g.values()
        with torch.no_grad():
            acc = state[rows] + vals.pow(2).mean(dim=1)
            state[rows] = acc
            param[rows] -= (a.lr / (acc.sqrt() + eps)).unsqueeze(1) * vals
        param.grad = None

    step_ms = median_ms(rowwise_step, a.warmup, a.iters)
    emit(bench="torch_backward_rowwise_adagrad", optimizer="row-wise Adagrad in torch ops", ids=num_ids,
         unique_rows=unique_rows, median_ms=round(step_ms - fwd_ms, 4), step_ms=round(step_ms, 4),
         unique_rows_per_s=unique_rows / ((step_ms - fwd_ms) * 1e-3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
