"""mistake: an mp.spawn worker crashes in native code (a null pointer through ctypes); the author
enabled faulthandler, so rank 1 prints a "Fatal Python error: Segmentation fault" stack before
dying of SIGSEGV.
label: P6
first_rank: 1
launch: python eval/runs/scripts/spawn_segfault_faulthandler.py
source: none known
"""

import ctypes
import faulthandler
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def augment(rank, batch):
    if rank == 1:
        ctypes.memmove(0, batch.data_ptr(), 16)
    return batch


def worker(rank, world_size):
    faulthandler.enable()
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    batch = augment(rank, torch.randn(4, 4))
    dist.all_reduce(batch)
    print(f"rank {rank} reduced", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29517")
    mp.spawn(worker, args=(2,), nprocs=2)
