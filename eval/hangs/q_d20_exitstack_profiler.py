"""The training entry point opens its resources in a `contextlib.ExitStack`: a step profiler that,
when closed, gathers every rank's step times to report the slowest rank, and the metrics file.

Hang class: one rank raised (a malformed record) inside the `with ExitStack()`; while the exception
unwinds, the profiler's `__exit__` waits in an all_gather the others never reach (they are still
training). No traceback is printed yet: the exception is still in flight.
Label: D20
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 11b

Rank 1's shard holds a record whose label is missing (`None`); `torch.tensor` raises a TypeError
in `collate`. The exception climbs to `main`'s `with ExitStack() as stack:`, which closes the
profiler first (last in, first out): `StepProfiler.__exit__` all_gathers the step times. Rank 0 is
in the next step's gradient all_reduce.
"""

import contextlib
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class StepProfiler:
    def __init__(self, world: int) -> None:
        self.world = world
        self.times: list[float] = []
        self._t0 = 0.0

    def __enter__(self) -> "StepProfiler":
        return self

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.times.append(time.perf_counter() - self._t0)

    def __exit__(self, *exc: object) -> None:
        mine = torch.tensor([sum(self.times), float(len(self.times))])
        everyone = [torch.zeros(2) for _ in range(self.world)]
        dist.all_gather(everyone, mine)
        slowest = max(range(self.world), key=lambda r: everyone[r][0].item())
        print(f"slowest rank: {slowest}", flush=True)


def shard(rank: int) -> list[tuple[list[float], int | None]]:
    rows: list[tuple[list[float], int | None]] = [([float(i % 7)] * 6, i % 3) for i in range(400)]
    rows[251] = ([0.5] * 6, None)  # an unlabeled record from the last export
    return rows[rank::2]


def collate(rows: list[tuple[list[float], int | None]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


def train(rank: int, model: nn.Module, prof: StepProfiler, log: object) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rows = shard(rank)
    for epoch in range(20):
        for start in range(0, len(rows), 8):
            prof.start()
            x, y = collate(rows[start : start + 8])
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
            prof.stop()
        print(f"epoch {epoch} loss {loss.item():.3f}", file=log, flush=True)  # type: ignore[call-overload]


def main(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29531"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(6, 3)
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(os.path.join(tempfile.gettempdir(), f"metrics{rank}.txt"), "w"))
        prof = stack.enter_context(StepProfiler(world))
        train(rank, model, prof, log)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2, join=True)
