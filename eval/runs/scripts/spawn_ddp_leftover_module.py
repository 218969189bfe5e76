"""mistake: a module kept from an earlier experiment (`self.old_proj`) is still constructed but no
longer called in forward; the model is trained with DDP under mp.spawn.
label: D8
first_rank: none
launch: python eval/runs/scripts/spawn_ddp_leftover_module.py
source: https://github.com/pytorch/pytorch/issues/43259
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 12)
        self.old_proj = nn.Linear(12, 12)
        self.out = nn.Linear(12, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.proj(x)))


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = nn.parallel.DistributedDataParallel(Encoder())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for it in range(4):
        loss = model(torch.randn(8, 12)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank={rank} it={it} loss={loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "12355")
    mp.spawn(train, args=(2,), nprocs=2, join=True)
