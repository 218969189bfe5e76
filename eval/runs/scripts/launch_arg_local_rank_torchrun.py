"""mistake: a script written for `python -m torch.distributed.launch` takes `--local_rank` from
argparse (default -1) and only initialises the process group `if args.local_rank != -1`; started
with torchrun, which passes no such argument (it sets LOCAL_RANK in the environment), every rank
skips init and the first distributed call fails.
label: E4
alternates: D1
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/launch_arg_local_rank_torchrun.py
source: none known
written: session 10b, unseen
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--epochs", type=int, default=2)
    return parser.parse_args()


def main():
    args = parse()
    distributed = args.local_rank != -1
    if distributed:
        dist.init_process_group("gloo")
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        avg /= dist.get_world_size()
        print(f"epoch {epoch} loss {avg.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
