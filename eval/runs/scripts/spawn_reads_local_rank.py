"""mistake: a script written for torchrun (it reads LOCAL_RANK and WORLD_SIZE from the
environment) is started with torch.multiprocessing.spawn, which sets neither.
label: D1
first_rank: none
launch: python eval/runs/scripts/spawn_reads_local_rank.py
source: none known
"""

import os

import torch.distributed as dist
import torch.multiprocessing as mp


def train(index):
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=local_rank, world_size=world_size)
    print("rank", dist.get_rank(), "of", world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29541")
    mp.spawn(train, nprocs=2)
