"""mistake: the "main process first" pattern (the other ranks wait at a barrier while rank 0
tokenises and caches the dataset) with the process group created with timeout=timedelta(seconds=5);
rank 0's preprocessing takes longer than that, so the waiting ranks time out.
label: MN3
alternates: D23
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/main_process_first_tokenize.py
source: none known
"""

import time
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist


@contextmanager
def main_process_first(rank):
    if rank != 0:
        dist.barrier()
    yield
    if rank == 0:
        dist.barrier()


def tokenize(n):
    out = []
    start = time.time()
    while time.time() - start < 20:
        out.append(len(str(n)))
        time.sleep(0.05)
    return out


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    with main_process_first(rank):
        if rank == 0:
            print("Running tokenizer on dataset", flush=True)
            tokenize(1000)
        print(f"rank {rank}: dataset ready", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
