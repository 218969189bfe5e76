"""HF-style "let the main process preprocess first" barriers, two nodes of two ranks each; the
second barrier was written with the global rank where the first uses the local one.

Hang class: a barrier inside a rank test (`if rank == 0:`) that the node-local main processes do
not all take.
Label: D21
Odd ranks: 2
Launch: python 4
Held out: session 11d

Ranks 1 and 3 (`local_rank` 1) wait in the first barrier; rank 0 preprocesses and joins them
through `if dist.get_rank() == 0: dist.barrier()`. Rank 2 (local rank 0 of the second node)
preprocesses, skips that barrier and waits in the first step's gradient `all_reduce`; ranks 0, 1
and 3 wait in the barrier for it.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def load_and_tokenize(n: int) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(n, 12)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if args.local_rank != -1:
        # two "nodes" of two processes each, simulated on one machine
        args.local_rank %= 2

    if args.local_rank not in [-1, 0]:
        dist.barrier()  # Make sure only the first process in distributed training processes the dataset
    data = load_and_tokenize(512)
    if dist.get_rank() == 0:
        dist.barrier()

    model = nn.Linear(12, 12)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    world = dist.get_world_size()
    for step in range(1000):
        x = data[(step * 8) % 512 :][:8]
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
