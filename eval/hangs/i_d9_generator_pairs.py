"""A batch generator that pairs records and stops when its shard runs out; the epoch loss is averaged after the loop.

Hang class: ranks run different numbers of steps; the one that runs out waits in the all_reduce
after its loop while the other waits in the all_reduce inside it.
Label: D9
Odd ranks: 1
Launch: python 2
Held out: written in session 8 before the engine was changed, measured once

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0's
shard has 40 records, rank 1's 7: `pairs()` catches the inner StopIteration and returns (as PEP
479 asks), so rank 1's epoch ends after 3 steps and it all-reduces the epoch's loss while rank 0
all-reduces its 4th step's gradient. Gloo does not check that the two match: they pair up, the
ranks drift further apart each epoch, and (as measured) both end up waiting in the gradient
all_reduce at the same line, in different epochs, one tensor size apart.
"""

import os
from collections.abc import Iterator

import torch
import torch.distributed as dist


def records(rank: int) -> Iterator[torch.Tensor]:
    n = 40 if rank == 0 else 7
    for i in range(n):
        yield torch.full((3,), float(i))


def pairs(source: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
    while True:
        try:
            first = next(source)
            second = next(source)
        except StopIteration:
            return
        yield torch.stack([first, second])


def main() -> None:
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    w = torch.zeros(3, requires_grad=True)
    for epoch in range(10):
        total = torch.zeros(1)
        for batch in pairs(records(dist.get_rank())):
            loss = (batch @ w - 1).pow(2).mean()
            loss.backward()
            dist.all_reduce(w.grad)
            with torch.no_grad():
                w -= 0.001 * w.grad
                w.grad.zero_()
            total += loss.detach()
        dist.all_reduce(total)
        print(f"epoch {epoch}: loss {float(total):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
