"""A producer/consumer pipeline written with generator coroutines: the reader pushes batches into
a `train_sink` coroutine with `send()`, and the sink steps the model and averages the gradients.

Hang class: ranks run different numbers of batches; the rank whose shard runs out first stops
driving its sink and goes to the end-of-epoch barrier while the others are in the sink's
all_reduce.
Label: D9
Odd ranks: 2
Launch: python 3
Held out: session 11c

One `python` per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The corpus is split by
file, three files of 40, 40 and 26 records; rank 2's reader is exhausted after 6 batches of 4
and waits in `dist.barrier()`; ranks 0 and 1 wait in the sink's `all_reduce` of batch 7.
"""

from collections.abc import Generator, Iterator

import torch
import torch.distributed as dist
from torch import nn

FILE_SIZES = [40, 40, 26]


def read_file(index: int) -> Iterator[torch.Tensor]:
    gen = torch.Generator().manual_seed(index)
    for _ in range(FILE_SIZES[index]):
        yield torch.randn(10, generator=gen)


def batches(records: Iterator[torch.Tensor], size: int) -> Iterator[torch.Tensor]:
    buf: list[torch.Tensor] = []
    for rec in records:
        buf.append(rec)
        if len(buf) == size:
            yield torch.stack(buf)
            buf = []


def train_sink(model: nn.Module, world: int) -> Generator[None, torch.Tensor, None]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    while True:
        x = yield
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(10, 1)
    for epoch in range(3):
        sink = train_sink(model, world)
        next(sink)
        for batch in batches(read_file(rank), 4):
            sink.send(batch)
        sink.close()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
