"""mistake: for fine-tuning, the classifier head is replaced after the model was wrapped in DDP
(`model.module.head = nn.Linear(...)`); DDP's reducer still waits for gradients of the old head's
parameters, which no longer take part in the forward.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_replace_head_after_wrap.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Net(classes=10))
    model.module.head = nn.Linear(32, 3)  # the new task has 3 classes
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
