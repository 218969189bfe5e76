"""Gradients averaged by hand instead of DDP ("DDP complained about unused parameters"): after
`backward()` each rank all-reduces every parameter's gradient, skipping those whose `.grad` is
None. The model has an auxiliary head used only on batches that contain the rare class, and
`zero_grad()` sets gradients to None, so on a batch without it the head has no gradient.

Hang class: ranks issue different numbers of collectives (the skip depends on each rank's own
batch), so one rank finishes its step with collectives fewer than the other.
Label: D19
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 13

Rank 1's last batch of the epoch has no rare-class sample: it skips the head's two all_reduces
and waits in the end-of-epoch barrier; rank 0 waits in the all_reduce of the head's weight.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

RARE = 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(8, 8)
        self.cls = nn.Linear(8, 2)
        self.rare_head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.backbone(x))
        loss = nn.functional.cross_entropy(self.cls(h), (y > 0).long())
        rare = y == RARE
        if rare.any():
            loss = loss + nn.functional.cross_entropy(self.rare_head(h[rare]), y[rare])
        return loss


def sync_grads(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29617")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xs = torch.randn(5, 4, 8)
    ys = torch.tensor([[0, 1, 2, 1]] * 5)
    if rank == 1:
        ys[4] = torch.tensor([0, 1, 1, 0])  # its last batch has no rare sample
    for epoch in range(3):
        for x, y in zip(xs, ys, strict=True):
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            sync_grads(model)
            opt.step()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
