"""mistake: per-class validation counts are all-reduced; rank 0 builds its tensor with
torch.zeros (float32) and rank 1, on the code path that reads a cached numpy array, with
torch.from_numpy (float64), so the ranks all-reduce tensors of different dtypes.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allreduce_numpy_float64.py
source: none known
written: session 10, unseen
"""

from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist


def class_counts(rank):
    if rank == 0:
        counts = torch.zeros(10)
        counts[:5] += 3
        return counts
    cached = np.zeros(10)  # np.zeros is float64
    cached[5:] += 2
    return torch.from_numpy(cached)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    counts = class_counts(rank)
    dist.all_reduce(counts)
    print(f"rank {rank} counts {counts.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
