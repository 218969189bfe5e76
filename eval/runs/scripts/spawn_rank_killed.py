"""mistake: under mp.spawn, rank 1 loads a far bigger shard into host memory than rank 0, and the
kernel's OOM killer ends it (simulated by SIGKILL to itself) while rank 0 waits in the all-reduce.
label: D20
alternates: X3
first_rank: 1
launch: python eval/runs/scripts/spawn_rank_killed.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import os
import signal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def load_shard(rank):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return torch.randn(64, 8)


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    data = load_shard(rank)
    total = data.sum()
    dist.all_reduce(total)
    print(f"rank {rank}: total {total.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29521")
    mp.spawn(worker, args=(2,), nprocs=2)
