"""Rank 0 scatters work to the others point-to-point; one receiver expects a chunk more.

Hang class: a `dist.recv` with no matching send.
Label: D19
Odd ranks: 1
Launch: torchrun 3

Each receiver counts its chunks from its own view of the data (`len(shard) // CHUNK`, rounded up
on rank 1 by a `math.ceil`), rank 0 sends `len(shard) // CHUNK`. Rank 1 waits in `dist.recv` for a
chunk never sent; ranks 0 and 2 wait in the barrier after the exchange.
"""

import math

import torch
import torch.distributed as dist

CHUNK = 4


def shard_size(rank: int) -> int:
    return 18


def expected_chunks(rank: int) -> int:
    if rank == 1:
        return math.ceil(shard_size(rank) / CHUNK)
    return shard_size(rank) // CHUNK


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for round_ in range(50):
        if rank == 0:
            for dst in range(1, world):
                for _ in range(shard_size(dst) // CHUNK):
                    dist.send(torch.randn(CHUNK), dst=dst)
        else:
            received = []
            for _ in range(expected_chunks(rank)):
                buf = torch.empty(CHUNK)
                dist.recv(buf, src=0)
                received.append(buf)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
