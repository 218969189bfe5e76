"""mistake: the mp.spawn launcher sets the rendezvous variables in Python and assigns the port as an
int (`os.environ["MASTER_PORT"] = port`), copied from a snippet where it was a string.
label: none
first_rank: none
launch: python eval/runs/scripts/master_port_int_spawn.py
source: none known
written: session 9, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PORT = int(os.environ.get("MASTER_PORT", "29500"))


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.ones(2) * rank
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


def main():
    world_size = 2
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = PORT
    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)


if __name__ == "__main__":
    main()
