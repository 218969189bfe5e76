"""mistake: predictions are collected on rank 0 with dist.gather, but every rank passes the
gather_list it allocated (the receive buffers were built unconditionally, outside `if rank == 0`).
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/gather_list_every_rank.py
source: none known
written: session 10, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    preds = torch.full((5,), float(rank))
    buffers = [torch.empty(5) for _ in range(world)]
    dist.gather(preds, gather_list=buffers, dst=0)
    if rank == 0:
        print("all predictions:", torch.cat(buffers).tolist(), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
