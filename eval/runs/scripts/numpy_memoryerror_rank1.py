"""mistake: rank 1 precomputes a dense co-occurrence matrix for its shard's vocabulary with numpy,
sized from a vocabulary count read from a stale cache (2**20 instead of 5000), and the allocation fails with
MemoryError while rank 0 waits in the all-reduce of the first step.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/numpy_memoryerror_rank1.py
source: none known
written: session 9, unseen
"""

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn


def cooccurrence(rank):
    vocab = 5000 if rank == 0 else 2**20
    return np.zeros((vocab, vocab), dtype=np.float32)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(16, 1))
    stats = cooccurrence(rank)
    loss = model(torch.randn(4, 16)).sum() * float(stats.shape[0] > 0)
    loss.backward()
    print(f"rank {rank} step 0 done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
