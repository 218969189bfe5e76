"""mistake: under mp.spawn, rank 1 builds its output layer from a vocabulary size read from a
corrupt cache (2**40 instead of 32000), and the allocation fails with an out-of-memory error while
rank 0 waits in the first all-reduce.
label: D20
first_rank: 1
launch: python eval/runs/scripts/spawn_rank_alloc_fails.py
source: none known
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def vocab_size(rank):
    return 2**40 if rank == 1 else 32000


def worker(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    head = torch.zeros(vocab_size(rank), 64)
    stats = torch.tensor([float(head.shape[0])])
    dist.all_reduce(stats)
    print(rank, stats)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29512")
    mp.spawn(worker, args=(2,), nprocs=2)
