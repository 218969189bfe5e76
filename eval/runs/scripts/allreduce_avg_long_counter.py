"""mistake: validation accuracy is averaged across ranks by all-reducing the count of correct
predictions with `op=dist.ReduceOp.AVG`; the count is an integer (Long) tensor from `(pred == y).sum()`
and the average cannot be written back into it, so every rank raises at the first evaluation.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allreduce_avg_long_counter.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def evaluate(model, rank):
    gen = torch.Generator().manual_seed(rank)
    with torch.no_grad():
        x, y = torch.randn(32, 8, generator=gen), torch.randint(0, 3, (32,), generator=gen)
        correct = (model(x).argmax(-1) == y).sum()
    dist.all_reduce(correct, op=dist.ReduceOp.AVG)
    return correct.item() / 32


def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    print(f"[rank {rank}] starting evaluation", flush=True)
    acc = evaluate(model, rank)
    if rank == 0:
        print(f"val acc {acc:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
