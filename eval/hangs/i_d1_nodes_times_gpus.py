"""The classic mp.spawn tutorial layout: world_size = nodes * gpus, with `--nodes` defaulting to 2.

Hang class: the group waits for ranks that nobody started (the second node's).
Label: D1
Odd ranks: 2 3
Launch: mp.spawn 2 world 4
Held out: written in session 8 before the engine was changed, measured once

`python train.py` on one machine: argparse's defaults say 2 nodes of 2 processes, so
`world_size` is 4 while mp.spawn starts the 2 local ones (`--nr 0`). Ranks 0 and 1 wait in
`init_process_group` for ranks 2 and 3.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def train(gpu: int, args: argparse.Namespace) -> None:
    rank = args.nr * args.gpus + gpu
    dist.init_process_group(backend="gloo", init_method="env://", world_size=args.world_size, rank=rank)
    model = nn.Linear(10, 10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(args.epochs):
        loss = model(torch.randn(4, 10)).sum()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--nodes", default=2, type=int)
    parser.add_argument("-g", "--gpus", default=2, type=int, help="processes per node")
    parser.add_argument("-nr", "--nr", default=0, type=int, help="rank of this node")
    parser.add_argument("--epochs", default=2, type=int)
    args = parser.parse_args()
    args.world_size = args.gpus * args.nodes
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "8888")
    mp.spawn(train, nprocs=args.gpus, args=(args,))


if __name__ == "__main__":
    main()
