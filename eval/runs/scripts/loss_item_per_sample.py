"""mistake: the criterion is built with `reduction="none"` (for per-sample weights later) and the
logging line calls `loss.item()` on the unreduced loss; every rank fails alike.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/loss_item_per_sample.py
source: none known
written: session 12b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(10, 3))
    criterion = nn.CrossEntropyLoss(reduction="none")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(8, 10), torch.randint(0, 3, (8,))
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.mean().backward()
        opt.step()
        if step % 1 == 0:
            print(f"rank {dist.get_rank()} step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
