"""A script from the `torch.distributed.launch` days: it takes its rank from the `--local_rank`
argument that launcher appended (the same as the global rank on a single node), default 0.
Started the README's "no launcher" way, one `python train.py` per process with RANK, WORLD_SIZE
and the master's address exported, nobody passes `--local_rank`.

Hang class: no launcher; the rank argument the script reads is never given and falls back to its
default, so both processes ask for rank 0 and the group waits for a rank 1 nobody is.
Label: D1
Odd ranks: 1
Launch: python 2 gone
Held out: session 12b

Both processes call `init_process_group(rank=0, world_size=2)`: the first started owns the store
and waits in `init_process_group` for rank 1; the second cannot open the store's port and exits.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def setup() -> tuple[int, int]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    local_rank = parser.parse_args().local_rank
    world = int(os.environ.get("WORLD_SIZE", 1))
    dist.init_process_group("gloo", rank=local_rank, world_size=world)
    return local_rank, world


def main() -> None:
    rank, world = setup()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    for _ in range(100):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
