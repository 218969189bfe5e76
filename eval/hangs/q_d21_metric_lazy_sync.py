"""A torchmetrics-style metric that syncs its states lazily: `compute()` all_reduces only when the
metric was updated on this rank (an optimisation copied from a "skip the sync if nothing changed"
cache).

Hang class: a rank whose validation slice is empty never updates the metric, so its `compute()`
returns without the collective that the other ranks wait in.
Label: D21
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 11b

The validation set (4 images) is cut into contiguous chunks of `ceil(4 / 3) = 2`: ranks 0 and 1 get
two each, rank 2 none. Ranks 0 and 1 wait in the all_reduce inside `Accuracy.compute`; rank 2 skipped
it (`if not self._updated: return ...`) and waits in the barrier before the checkpoint.
"""

import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class Accuracy:
    def __init__(self) -> None:
        self.correct = torch.zeros(())
        self.total = torch.zeros(())
        self._updated = False
        self._cache: float | None = None

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        self.correct += (logits.argmax(dim=1) == target).sum()
        self.total += target.numel()
        self._updated = True

    def compute(self) -> float:
        if not self._updated:
            return self._cache if self._cache is not None else 0.0
        state = torch.stack([self.correct, self.total])
        dist.all_reduce(state)
        self._cache = (state[0] / state[1].clamp(min=1)).item()
        self._updated = False
        return self._cache

    def reset(self) -> None:
        self.correct.zero_()
        self.total.zero_()


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29532"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Linear(12, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    val = [(torch.randn(12), i % 4) for i in range(4)]
    chunk = math.ceil(len(val) / world)
    my_val = val[rank * chunk : (rank + 1) * chunk]
    acc = Accuracy()
    for epoch in range(10):
        for _ in range(25):
            x, y = torch.randn(16, 12), torch.randint(4, (16,))
            nn.functional.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            for x, y in my_val:
                acc.update(model(x[None]), torch.tensor([y]))
        score = acc.compute()
        acc.reset()
        dist.barrier()  # everyone has validated before rank 0 saves
        if rank == 0:
            print(f"epoch {epoch} val acc {score:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
