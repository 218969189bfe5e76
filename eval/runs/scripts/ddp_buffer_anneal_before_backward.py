"""mistake: the distillation temperature is a registered buffer that the loop anneals in place
(`model.module.temperature.mul_(0.98)`) right after computing the loss and before loss.backward();
the division in forward saved the buffer for backward, so autograd finds it modified on every rank.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_buffer_anneal_before_backward.py
source: none known
written: session 10, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
        self.register_buffer("temperature", torch.tensor(4.0))

    def forward(self, x):
        return self.body(x) / self.temperature


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Student())
    teacher = nn.Linear(20, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(5):
        x = torch.randn(16, 20)
        with torch.no_grad():
            soft = F.softmax(teacher(x) / 4.0, dim=-1)
        logits = model(x)
        loss = F.kl_div(F.log_softmax(logits, dim=-1), soft, reduction="batchmean")
        with torch.no_grad():
            model.module.temperature.mul_(0.98)  # anneal towards 1
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
