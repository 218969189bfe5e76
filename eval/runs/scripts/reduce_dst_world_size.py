"""mistake: the per-rank metrics are reduced to "the last rank", which hosts the logger, written as
`dst=dist.get_world_size()` (off by one); every rank raises for an invalid root rank.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/reduce_dst_world_size.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(4, 1)
    loss_sum = torch.zeros(1)
    for _ in range(3):
        loss_sum += model(torch.randn(8, 4)).pow(2).mean().detach()
    logger_rank = world  # the logger runs on the last rank
    dist.reduce(loss_sum, dst=logger_rank)
    if rank == logger_rank:
        print(f"mean loss {loss_sum.item() / (3 * world):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
