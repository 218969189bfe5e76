"""Each rank decompresses its shard files with gzip before training; one rank's list is empty.

Hang class: one rank alone waits in an external tool (gzip reading its standard input, because
no file was named) while the others wait in the monitored barrier after the preparation.
Label: MN3
Odd ranks: 2
Launch: torchrun 3
Held out: session 10

`prepare()` runs `gzip -dc <files>` on the rank's shard files and keeps stdout. Files are dealt
round-robin (`files[rank::world]`); this dataset has two training files and the job three ranks,
so rank 2's list is empty. `gzip -dc` with no file reads stdin, which is the launcher's and stays
open; ranks 0 and 1 wait in `dist.monitored_barrier` (meant to name a slow rank, it waits for
the 30-minute default timeout).
"""

import glob
import gzip
import os
import subprocess
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def write_shards(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for name in ("val", "train-000", "train-001"):
        with gzip.open(os.path.join(folder, f"{name}.txt.gz"), "wt") as f:
            f.write("\n".join(f"{name} line {i}" for i in range(500)))


def prepare(folder: str, rank: int, world: int) -> list[str]:
    files = sorted(glob.glob(os.path.join(folder, "train-*.txt.gz")))
    mine = files[rank::world]
    out = subprocess.run(["gzip", "-dc", *mine], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    folder = os.path.join(tempfile.gettempdir(), f"shards-{os.getppid()}")
    if rank == 0:
        write_shards(folder)
    dist.barrier()
    lines = prepare(folder, rank, world)
    dist.monitored_barrier(wait_all_ranks=True)
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in lines:
        loss = model(torch.randn(2, 16)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
