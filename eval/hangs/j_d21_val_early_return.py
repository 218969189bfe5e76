"""A validation function that returns early on a rank whose validation shard has no full batch.

Hang class: a collective (the metric all_reduce) skipped by the rank that has nothing to score.
Label: D21
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 9

The validation set (8 samples) is split by hand, `samples[rank::world]`, and batched with
`drop_last=True` and a batch of 3: rank 2 gets 2 samples, no batch, and `validate()` returns
before the all_reduce of the summed loss. Rank 2 goes on to the barrier before the checkpoint;
ranks 0 and 1 wait in the metric all_reduce.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def validate(model: nn.Module, loader: DataLoader) -> float | None:
    if len(loader) == 0:
        return None  # nothing to score on this rank
    model.eval()
    stats = torch.zeros(2)
    with torch.no_grad():
        for x, y in loader:
            stats[0] += nn.functional.mse_loss(model(x), y, reduction="sum")
            stats[1] += len(x)
    dist.all_reduce(stats)
    model.train()
    return (stats[0] / stats[1]).item()


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)
    val = TensorDataset(xs[rank::world], ys[rank::world])
    val_loader = DataLoader(val, batch_size=3, drop_last=True)
    model = DDP(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(50):
        for _ in range(10):
            loss = model(torch.randn(4, 6)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        score = validate(model, val_loader)
        if rank == 0:
            print(f"epoch {epoch}: val {score}", flush=True)
            torch.save(model.state_dict(), os.devnull)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3)
