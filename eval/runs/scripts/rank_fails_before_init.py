"""mistake: each rank opens its own data shard before joining the process group; rank 1's shard
file is missing, so it raises FileNotFoundError while rank 0 waits in init_process_group.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank_fails_before_init.py
source: none known
"""

import os
import tempfile

import torch
import torch.distributed as dist


def open_shard(rank):
    path = os.path.join(tempfile.gettempdir(), f"runs7_shard_{rank}.pt")
    if rank == 0:
        torch.save(torch.arange(10), path)
    return torch.load(path)


def main():
    rank = int(os.environ["RANK"])
    shard = open_shard(rank)
    dist.init_process_group("gloo")
    total = torch.tensor([shard.sum().item()])
    dist.all_reduce(total)
    print(rank, total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
