"""A metrics tracker whose `compute()` averages its running sums over ranks with `all_reduce`; the
training loop logs with it under `if step % log_every == 0 and rank == 0`. The model is trained
with local SGD: parameters are averaged once per epoch, after a barrier.

Hang class: a collective inside a helper called under a rank test (rank-conditional collective).
Label: D21
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 12b

At step 20 rank 0 waits in the all_reduce inside `MeanTracker.compute`; ranks 1 and 2 finish the
epoch and wait in the barrier before the parameter averaging.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class MeanTracker:
    def __init__(self) -> None:
        self.sums = torch.zeros(2)

    def update(self, loss: float, correct: float) -> None:
        self.sums += torch.tensor([loss, correct])

    def compute(self, count: int) -> dict[str, float]:
        totals = self.sums.clone()
        dist.all_reduce(totals)
        totals /= count * dist.get_world_size()
        return {"loss": float(totals[0]), "acc": float(totals[1])}


def average_parameters(model: nn.Module) -> None:
    dist.barrier()
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29573")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    tracker = MeanTracker()
    log_every = 20
    step = 0
    for epoch in range(100):
        for _ in range(50):
            x = torch.randn(64, 20)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            tracker.update(loss.item(), (logits.argmax(1) == y).float().mean().item())
            if step % log_every == 0 and rank == 0:
                print(f"step {step} {tracker.compute(step)}", flush=True)
        average_parameters(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
