"""mistake: a small mixture-of-experts layer with top-1 routing wrapped in DDP with the default
settings; on a step where the router sends no token to one expert, that expert's parameters get no
gradient and DDP's next iteration fails ("Expected to have finished reduction").
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/moe_top1_unused_experts.py
source: https://github.com/pytorch/pytorch/issues/43259
written: session 12b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class MoE(nn.Module):
    def __init__(self, dim=8, experts=4):
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x):
        choice = self.router(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            mask = choice == i
            if mask.any():
                out[mask] = expert(x[mask])
        return out


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 8), MoE()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
