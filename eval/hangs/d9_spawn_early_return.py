"""A training epoch that returns at the first empty batch, started with mp.spawn.

Hang class: one rank ends its epoch early (uneven data after filtering), then waits in the
gather of the evaluation while the other is still training.
Label: D9
Odd ranks: 1
Launch: mp.spawn 2

The collate function drops invalid samples and returns None for a batch with none left; the
loop treats None as the end of the data (`return`). Rank 1's shard has a batch of invalid samples,
so it returns from `train_one_epoch` early and waits in `all_gather` inside `evaluate` while rank 0
waits in DDP's all-reduce inside `backward()`.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def drop_invalid(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor] | None:
    kept = [(x, y) for x, y in batch if torch.isfinite(x).all()]
    if not kept:
        return None
    return torch.stack([x for x, _ in kept]), torch.stack([y for _, y in kept])


def train_one_epoch(model: nn.Module, loader: DataLoader, opt: torch.optim.Optimizer) -> None:
    for batch in loader:
        if batch is None:
            return
        x, y = batch
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def evaluate(model: nn.Module, rank: int, world: int) -> float:
    correct = torch.tensor([rank + 1.0])
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, correct)
    return float(sum(gathered))


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "12355"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.randn(400, 10)
    x[41:80:2] = float("nan")  # a run of corrupt rows, all in rank 1's shard
    y = torch.randint(0, 3, (400,))
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(data, batch_size=4, sampler=sampler, collate_fn=drop_invalid)
    model = DDP(nn.Linear(10, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        sampler.set_epoch(epoch)
        train_one_epoch(model, loader, opt)
        score = evaluate(model, rank, world)
        if rank == 0:
            print(f"epoch {epoch}: {score}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
