"""mistake: per-rank predictions are gathered with all_gather, but rank 1 computed them in float64
(its metric helper calls .double()) while rank 0 allocated float32 buffers.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allgather_mixed_dtype.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def predictions(rank):
    scores = torch.rand(16)
    return scores.double() if rank == 1 else scores


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    local = predictions(rank)
    buffers = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(buffers, local)
    if rank == 0:
        print("gathered", torch.cat(buffers).shape)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
