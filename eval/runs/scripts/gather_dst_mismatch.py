"""mistake: results are gathered to "the main process", but the helper computes dst from
LOCAL_RANK-based logic that gives each rank itself, so the ranks call gather with different dst.
label: D19
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/gather_dst_mismatch.py
source: none known
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main_process():
    return int(os.environ.get("LOCAL_RANK", 0))  # meant: 0 on every rank


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    dst = main_process()
    out = torch.tensor([float(rank)])
    bucket = [torch.empty(1) for _ in range(dist.get_world_size())] if rank == dst else None
    dist.gather(out, gather_list=bucket, dst=dst)
    print(rank, bucket, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
