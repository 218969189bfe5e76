"""mistake: an ordinary bug: the evaluation helper turns autograd off with
`torch.set_grad_enabled(False)` (instead of a `with torch.no_grad():` block) and never turns it back
on, so the next epoch's loss has no grad_fn and every rank raises in backward. Nothing distributed
is wrong.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/grad_disabled_after_eval.py
source: https://discuss.pytorch.org/t/element-0-of-tensors-does-not-require-grad-and-does-not-have-a-grad-fn/32908
written: session 11c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model, data):
    model.eval()
    torch.set_grad_enabled(False)
    correct = sum((model(x).argmax(-1) == y).sum().item() for x, y in data)
    model.train()
    return correct


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = [(torch.randn(8, 10), torch.randint(0, 3, (8,))) for _ in range(4)]
    for epoch in range(3):
        for x, y in data:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc = evaluate(model, data)
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f} correct {acc}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
