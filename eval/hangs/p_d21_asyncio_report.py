"""Rank 0 writes the epoch report with asyncio (uploads overlap); the report gathers every rank's
predictions through `run_in_executor` so the event loop is not blocked.

Hang class: a collective reached only on rank 0 (inside `if rank == 0: asyncio.run(...)`), issued
from an executor thread; the other ranks wait in the next barrier.
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 11

`report()` awaits `loop.run_in_executor(None, dist.all_gather_object, ...)` to collect the
predictions of all ranks, then uploads the files concurrently. Only rank 0 runs the report, so its
executor thread waits in the all_gather for rank 1, whose main thread went on to the barrier at
the top of the next epoch; rank 0's main thread sits in the event loop's selector.
"""

import asyncio
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


async def upload(name: str, payload: object) -> None:
    await asyncio.sleep(0.01)  # stands in for an HTTP PUT


async def report(epoch: int, preds: list[int], world: int) -> None:
    loop = asyncio.get_running_loop()
    gathered: list[object] = [None] * world
    await loop.run_in_executor(None, dist.all_gather_object, gathered, preds)
    await asyncio.gather(
        upload(f"epoch{epoch}/predictions.json", gathered),
        upload(f"epoch{epoch}/summary.json", {"n": sum(len(p) for p in gathered)}),  # type: ignore[arg-type]
    )


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29514"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        dist.barrier()  # start the epoch together
        for _ in range(20):
            x = torch.randn(8, 4)
            loss = nn.functional.cross_entropy(model(x), torch.randint(3, (8,)))
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            preds = model(torch.randn(16, 4)).argmax(dim=1).tolist()
        if rank == 0:
            asyncio.run(report(epoch, preds, world))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
