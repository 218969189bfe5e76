"""mistake: mp.spawn workers call init_process_group(init_method="env://") with rank and world
size, but the script never sets MASTER_ADDR (only a MASTER_PORT comes from the shell), so the
env:// rendezvous has no address.
label: D1
first_rank: none
launch: python eval/runs/scripts/spawn_no_master_addr.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def worker(rank, world_size):
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    out = model(torch.randn(4, 8)).sum()
    out.backward()
    print(f"[worker {rank}] step done")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)
