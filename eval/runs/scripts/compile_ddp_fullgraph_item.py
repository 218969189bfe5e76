"""mistake: the DDP model is compiled with `torch.compile(model, fullgraph=True)` (to "make sure nothing falls
back to eager"), and its forward skips the residual branch with a data-dependent Python check,
`if h.abs().max().item() > 10:`; fullgraph refuses the graph break on every rank at the first step.
label: E8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/compile_ddp_fullgraph_item.py
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.abs().max().item() > 10:
            return h
        return h + self.fc2(h)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Block())
    model = torch.compile(model, fullgraph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
