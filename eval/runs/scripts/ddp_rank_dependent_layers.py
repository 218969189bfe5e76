"""mistake: a debugging head is added on rank 0 only (`if rank == 0: self.probe = Linear(...)`),
so the DDP-wrapped models have different parameter counts.
label: E20
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_rank_dependent_layers.py
source: none known
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 24)
        self.fc2 = torch.nn.Linear(24, 3)
        if rank == 0:
            self.probe = torch.nn.Linear(24, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Net(rank))
    print(rank, sum(p.numel() for p in model.parameters()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
