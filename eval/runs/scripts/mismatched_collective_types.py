"""mistake: rank 0 broadcasts the early-stopping flag while the other rank all-reduces it (the two
code paths were edited separately), same tensor shape.
label: D19
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/mismatched_collective_types.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for epoch in range(3):
        stop = torch.tensor([1 if epoch == 2 else 0])
        if rank == 0:
            dist.broadcast(stop, src=0)
        else:
            dist.all_reduce(stop)
        dist.all_reduce(torch.randn(256))
        print(f"rank {rank} epoch {epoch} stop={stop.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
