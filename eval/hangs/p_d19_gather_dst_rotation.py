"""Evaluation predictions are gathered to a "writer" rank that rotates with the samples seen, to
spread the disk writes over the ranks; each rank counts its own samples.

Hang class: the ranks call `dist.gather` with different `dst` (computed from a rank-local counter),
so the gathers never match; the ranks that only had to send go on to the barrier.
Label: D19
Odd ranks: 2
Launch: torchrun 3
Held out: session 11

`writer_rank()` is `(samples_seen // 2000) % world`. Every rank skips the batches whose sequences
are all padding; rank
2's shard has a few more of those, so its count is behind, and after the fifth epoch ranks 0 and 1
name rank 0 as the writer while rank 2 names itself. Rank 0 waits to receive rank 2's
predictions, rank 2 (a writer too, it thinks) waits to receive the others', and rank 1, its send
done, waits in the barrier after the evaluation.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def writer_rank(samples_seen: int, world: int) -> int:
    return (samples_seen // 2000) % world


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(10, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    samples_seen = 0
    for epoch in range(10):
        for step in range(40):
            x = torch.randn(32, 10)
            empty = step % 10 == 0 if rank == 2 else step % 20 == 0  # all-padding batches
            loss = model(x).pow(2).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
            if not empty:
                samples_seen += 32
        with torch.no_grad():
            preds = model(torch.randn(64, 10)).argmax(dim=1).float()
        dst = writer_rank(samples_seen, world)
        bucket = [torch.empty_like(preds) for _ in range(world)] if rank == dst else None
        dist.gather(preds, bucket, dst=dst)
        if rank == dst:
            torch.save(torch.cat(bucket), os.path.join(tempfile.gettempdir(), f"preds{epoch}.pt"))  # type: ignore[arg-type]
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch}: predictions written by rank {dst}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
