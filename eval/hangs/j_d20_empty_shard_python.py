"""Per-rank shard files exported with an "empty shards are skipped" filter; one python per rank.

Hang class: one rank dies before joining the group (FileNotFoundError), the others wait for it
in `init_process_group`.
Label: D20
Odd ranks: 1
Launch: python 3 gone
Held out: session 9

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the way a
hand-written Slurm script starts them. Each rank exports its slice of the records, keeping those
that pass a quality filter and not writing a file when none passes; then loads its shard and joins
the group. Rank 1's slice is all low quality: it dies with FileNotFoundError before
`init_process_group`, and ranks 0 and 2 wait there for it. No launcher tears the job down.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def export_shard(root: str, rank: int, world: int) -> None:
    quality = torch.tensor([0.9, 0.1, 0.8, 0.7, 0.2, 0.95, 0.85, 0.05, 0.6])
    rows = [i for i in range(rank, len(quality), world) if quality[i] > 0.3]
    if rows:
        torch.save(torch.randn(len(rows), 4), os.path.join(root, f"shard-{rank:05d}.pt"))


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    root = os.path.join(tempfile.gettempdir(), "shards")
    os.makedirs(root, exist_ok=True)
    export_shard(root, rank, world)
    data = torch.load(os.path.join(root, f"shard-{rank:05d}.pt"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(4, 1)
    for _ in range(100):
        loss = model(data).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
