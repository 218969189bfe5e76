"""Rank 0 keeps the validation history and shares the best score with a broadcast inside its
helper; the helper returns early when the history is empty (validation starts after a warm-up),
before the broadcast. The other ranks call the broadcast every epoch.

Hang class: a collective skipped on rank 0 by an early return in a rank-0 helper.
Label: D21
Odd ranks: 0
Launch: python 3
Held out: session 11e

Epoch 0 is a warm-up, so rank 0's history is empty and `share_best` returns `None`; ranks 1 and 2
wait in `dist.broadcast`, rank 0 waits in DDP's all-reduce in `backward()` of epoch 1.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WARMUP_EPOCHS = 1


def share_best(history: list[float]) -> float | None:
    if not history:
        return None
    best = torch.tensor([min(history)])
    dist.broadcast(best, src=0)
    return best.item()


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history: list[float] = []
    for epoch in range(20):
        for _ in range(10):
            x = torch.randn(16, 8)
            loss = nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            if epoch >= WARMUP_EPOCHS:
                history.append(loss.item())
            best = share_best(history)
        else:
            best_t = torch.zeros(1)
            dist.broadcast(best_t, src=0)
            best = best_t.item()
        print(f"rank {rank} epoch {epoch} best {best}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
