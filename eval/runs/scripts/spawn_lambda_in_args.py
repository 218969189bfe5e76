"""mistake: the training function takes its loss as an argument and the launcher code passes a
lambda through `mp.spawn(train, args=(lambda out, y: ..., world_size), ...)`; spawn pickles the
arguments for the child processes and a lambda cannot be pickled.
label: E14
first_rank: none
launch: python eval/runs/scripts/spawn_lambda_in_args.py
source: none known
written: session 12c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, loss_fn, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    out = torch.randn(4, 2)
    y = torch.randn(4, 2)
    loss = loss_fn(out, y)
    dist.all_reduce(loss)
    print(f"rank {rank} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    world_size = 2
    mp.spawn(train, args=(lambda out, y: ((out - y) ** 2).mean(), world_size), nprocs=world_size, join=True)
