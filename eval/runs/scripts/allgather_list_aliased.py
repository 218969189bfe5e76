"""mistake: the receive buffers for all_gather are built with list multiplication,
`[torch.empty_like(t)] * world_size`, which repeats one tensor object, so every slot is the same
buffer and ends up holding the last rank's data; the evaluation's sanity check that the ranks'
predictions differ then fails on every rank. Started with mp.spawn.
label: none
first_rank: none
launch: python eval/runs/scripts/allgather_list_aliased.py
source: none known
written: session 11, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=20))
    torch.manual_seed(rank)
    preds = torch.randint(0, 10, (6,))
    gathered = [torch.empty_like(preds)] * world_size
    dist.all_gather(gathered, preds)
    allpreds = torch.cat(gathered)
    n_unique_shards = len({tuple(g.tolist()) for g in gathered})
    assert n_unique_shards == world_size, f"shards look duplicated: {n_unique_shards} unique of {world_size}"
    print(f"[rank {rank}] gathered {allpreds.numel()} predictions", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
