"""mistake: the mp.spawn script keeps the MASTER_ADDR of the cluster it was written on
("gpu-node-017.cluster.internal"), a host name that does not resolve on this machine.
label: E13
alternates: P1
first_rank: none
launch: python eval/runs/scripts/master_addr_unresolvable.py
source: none known
written: session 9, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=20))
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} {t.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "gpu-node-017.cluster.internal"
    os.environ.setdefault("MASTER_PORT", "29541")
    mp.spawn(worker, args=(2,), nprocs=2)
