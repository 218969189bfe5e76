"""A step context manager that syncs the ranks on exit, and a loop that skips bad batches.

Hang class: one rank raised inside the step; the exception goes up through `__exit__`, whose
barrier keeps the rank waiting while the others wait in the gradient all-reduce.
Label: D20
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 10

`step_scope()` times each step and lines the ranks up at its end (`dist.barrier()` in
`__exit__`, "so the timings are comparable"). The loop catches `ValueError` outside the `with`
to skip a malformed batch and go on. Rank 1's batch 25 fails its shape check before backward; the
exception passes through `__exit__`, which waits in the barrier, while rank 0 is in DDP's
gradient all-reduce for that step. The skip is never logged because `__exit__` never returns.
"""

import os
import time
from types import TracebackType

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class step_scope:
    def __init__(self, timings: list[float]) -> None:
        self.timings = timings

    def __enter__(self) -> "step_scope":
        self.start = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        dist.barrier()
        self.timings.append(time.perf_counter() - self.start)


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = 15 if (rank == 1 and step == 25) else 16  # one truncated record in rank 1's shard
    return torch.randn(32, width), torch.randn(32, 1)


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29531"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timings: list[float] = []
    skipped = 0
    for step in range(1000):
        try:
            with step_scope(timings):
                x, y = batch(rank, step)
                if x.shape[1] != 16:
                    raise ValueError(f"bad record at step {step}: {tuple(x.shape)}")
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        except ValueError as err:
            skipped += 1
            print(f"rank {rank}: skipping batch ({err})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
