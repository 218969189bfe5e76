"""mistake: evaluation iterates a per-rank list of validation files (3 on rank 0, 4 on rank 1) and
all-reduces a running metric per batch; rank 0 finishes first and waits at the end-of-eval
barrier while rank 1 is still in its extra all-reduce (init timeout 10 s, a progress bar per rank).
label: D9
alternates: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/eval_uneven_then_barrier.py
source: none known
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def progress(rank, i, n, acc):
    bar = "#" * (20 * i // n)
    sys.stdout.write(f"\r[rank{rank}] eval |{bar:<20}| {i}/{n} acc={acc:.3f}")
    sys.stdout.flush()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    files = [f"val_{rank}_{k}.bin" for k in range(3 + rank)]
    correct = torch.zeros(1)
    for i, _name in enumerate(files, 1):
        batch_correct = torch.tensor([float(torch.randint(0, 32, ()).item())])
        dist.all_reduce(batch_correct)
        correct += batch_correct
        progress(rank, i, len(files), correct.item() / (64 * i))
    sys.stdout.write("\n")
    dist.barrier()
    if rank == 0:
        print("eval accuracy", correct.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
