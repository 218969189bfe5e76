"""A script meant to be started once per process with `--rank`, run once as `python train.py`.

Hang class: the group waits for ranks that nobody started (no launcher; the world size comes
from the script's own defaults).
Label: D1
Odd ranks: 1
Launch: python 1 world 2
Held out: session 9

The README says "run `python train.py --rank 0` and `python train.py --rank 1`"; the user ran
the first line only. `--world-size` defaults to 2 and the rank to 0, so the only process is rank 0
and waits in `init_process_group` for rank 1.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--master", default="127.0.0.1:" + os.environ.get("MASTER_PORT", "23456"))
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank, world_size=args.world_size)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(100):
        loss = model(torch.randn(4, 8)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
