"""Data-parallel throughput of the char LM: characters per second of the whole job, and
the share of a step spent in the gradient all-reduce. Run it alone and under torchrun:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/distributed.py
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 torchrun --nproc_per_node=2 benchmarks/distributed.py

Each rank takes an equal share of every batch of --batch sequences.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from codegen import load
from codegen.distributed import BUCKET, DataParallel

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    charlm = load(ROOT / "examples" / "charlm.mdl", defines={"H": args.hidden},
                  name=f"charlm_h{args.hidden}")
    model = charlm.CharLM(seed=0)
    model.set_optimizer("adam", lr=3e-3, clip_norm=5.0)
    dp = DataParallel(model) if distributed else None
    share = args.batch // world
    rng = np.random.default_rng(rank)
    tokens = rng.integers(0, 96, (args.seq + 1, share)).astype(np.int32)
    shard = {"tokens": tokens[:-1], "targets": tokens[1:],
             "lengths": np.full(share, args.seq, np.int32)}
    steps, reduce = [], []
    for i in range(args.steps + 5):
        start = time.perf_counter()
        if dp is None:
            model.train_step(**shard)
        else:  # DataParallel.train_step, with its all-reduce timed apart
            model.forward_backward(**shard)
            mid = time.perf_counter()
            total = torch.tensor([float(share * args.seq)], dtype=torch.float64)
            dist.all_reduce(total)
            grads = torch.from_numpy(model.gradient_buffer)
            grads.mul_(share * args.seq / total.item())
            for bucket in grads.split(BUCKET):
                dist.all_reduce(bucket)
            if i >= 5:
                reduce.append(time.perf_counter() - mid)
            model.apply_gradients()
        if i >= 5:
            steps.append(time.perf_counter() - start)
    step = statistics.median(steps)
    if rank == 0:
        line = (f"{world} rank(s) x {os.environ.get('OMP_NUM_THREADS', '?')} thread: "
                f"{args.batch * args.seq / step:,.0f} characters/s, step {step * 1e3:.1f} ms")
        if reduce:
            line += (f", all-reduce {statistics.median(reduce) * 1e3:.2f} ms "
                     f"({statistics.median(reduce) / step:.0%} of the step, "
                     f"{model.gradient_buffer.size:,} gradients)")
        print(line)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
