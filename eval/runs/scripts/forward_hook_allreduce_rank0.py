"""mistake: to log the activation statistics averaged over ranks, a forward hook that all-reduces the
mean activation is registered only on the logging process (`if rank == 0:`); rank 0 runs an extra
all_reduce inside every forward that rank 1 never calls, so the ranks' collectives stop pairing
(30 s timeout).
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/forward_hook_allreduce_rank0.py
source: none known
written: session 13b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def log_activation(module, inputs, output):
    stat = output.detach().mean().reshape(1)
    dist.all_reduce(stat)
    stat /= dist.get_world_size()
    print(f"[act] {module.__class__.__name__} mean={stat.item():.4f}", flush=True)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    model = DDP(Net())
    if rank == 0:
        model.module.fc1.register_forward_hook(log_activation)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(20):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
