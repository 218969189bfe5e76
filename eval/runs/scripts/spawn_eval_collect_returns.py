"""mistake: a multi-process evaluation is started with `mp.spawn`, and the script expects the per-rank
accuracies as its return value (`results = mp.spawn(evaluate, ...)`, then `sum(results)`); every
rank evaluates and exits cleanly, and the parent fails because mp.spawn returns None (a plain
Python bug in a distributed run; the results should come back through a Queue or a gather).
label: none
first_rank: none
launch: python eval/runs/scripts/spawn_eval_collect_returns.py
source: none known
written: session 13c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def evaluate(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29562")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = nn.Linear(6, 3).eval()
    correct = total = 0
    with torch.no_grad():
        for _ in range(4):
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            correct += (model(x).argmax(-1) == y).sum().item()
            total += 8
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: accuracy {correct / total:.3f}")
    return correct / total


if __name__ == "__main__":
    world = 2
    results = mp.spawn(evaluate, args=(world,), nprocs=world, join=True)
    print("mean accuracy:", sum(results) / world)
