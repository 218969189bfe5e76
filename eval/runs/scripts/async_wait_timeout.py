"""mistake: gradient buckets are all-reduced with async_op=True and waited on with
`work.wait(timeout=timedelta(seconds=3))` (copied from a latency benchmark); rank 1 is slower
(a heavier augmentation) and the wait times out on rank 0.
label: MN3
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/async_wait_timeout.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist


def augment(rank, x):
    time.sleep(8 if rank == 1 else 0.1)
    return x * 2


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grads = augment(rank, torch.randn(256))
    work = dist.all_reduce(grads, async_op=True)
    work.wait(timeout=timedelta(seconds=3))
    print(f"rank {rank} reduced", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
