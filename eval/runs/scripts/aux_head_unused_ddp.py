"""mistake: an Inception-style model returns `(logits, aux_logits)`; the training loop unpacks
both but builds the loss from `logits` only, so the auxiliary head's parameters get no gradient and
DDP (default find_unused_parameters=False) fails on the second iteration.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/aux_head_unused_ddp.py
source: none known
written: session 12c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(12, 16)
        self.head = nn.Linear(16, 3)
        self.aux = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head(h), self.aux(h)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
        logits, aux_logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
