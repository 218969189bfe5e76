"""A hand-written epoch loop: `while True` around `next(it)`, leaving on StopIteration.

Hang class: ranks run out of data at different steps; the rank that ran out leaves the loop and
waits in the end-of-epoch barrier, the other waits in the gradient all_reduce.
Label: D9
Odd ranks: 1
Launch: python 2
Held out: session 11

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Files are
split round-robin between ranks and each file has its own number of lines, so rank 1 (files 1, 3,
5) has fewer batches than rank 0 (files 0, 2, 4). The loop is written with an explicit iterator so
the step can also pull a second batch for the auxiliary loss.
"""

import os

import torch
import torch.distributed as dist
from torch import nn

FILE_LINES = [90, 40, 85, 35, 70, 30]


def read_files(rank: int, world: int) -> list[torch.Tensor]:
    rows = []
    for index in range(rank, len(FILE_LINES), world):
        g = torch.Generator().manual_seed(index)
        rows.extend(torch.randn(FILE_LINES[index], 12, generator=g).unbind(0))
    return rows


def batches(rows: list[torch.Tensor], size: int):  # noqa: ANN201
    for i in range(0, len(rows), size):
        yield torch.stack(rows[i : i + size])


def main() -> None:
    dist.init_process_group(
        "gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"])
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rows = read_files(rank, world)
    for epoch in range(2):
        it = iter(batches(rows, 8))
        loss_sum = torch.zeros(1)
        while True:
            try:
                x = next(it)
            except StopIteration:
                break
            loss = model(x).pow(2).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            opt.zero_grad()
            loss_sum += loss.detach()
        dist.barrier()  # every rank done with the epoch before the summary
        dist.all_reduce(loss_sum)
        if rank == 0:
            print(f"epoch {epoch}: loss sum {float(loss_sum):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
