"""Predictions gathered batch by batch in an evaluation over a hand-strided split of the test set.

Hang class: the strided split gives rank 0 one batch more than the others.
Label: D9
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 9b

The test set (10 samples, batch 1) is split `range(rank, n, world)` without padding: rank 0 gets
4 samples, ranks 1 and 2 get 3. Each step all_gathers the prediction so rank 0 can write them
in order; after their last sample ranks 1 and 2 wait in the barrier before the report, rank 0 in
its fourth all_gather.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def evaluate(model: nn.Module, xs: torch.Tensor, rank: int, world: int) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    model.eval()
    with torch.no_grad():
        for i in range(rank, len(xs), world):
            pred = model(xs[i : i + 1]).argmax(-1)
            parts = [torch.zeros_like(pred) for _ in range(world)]
            dist.all_gather(parts, pred)
            out.extend(parts)
    return out


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Linear(32, 10)
    test_x = torch.randn(10, 32)
    for round_ in range(100):
        preds = evaluate(model, test_x, rank, world)
        dist.barrier()
        if rank == 0:
            print(f"round {round_}: {len(preds)} predictions", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3)
