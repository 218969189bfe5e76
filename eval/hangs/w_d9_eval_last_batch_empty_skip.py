"""Evaluation split by hand: the number of eval steps is worked out once for the whole set
(`ceil(len(dataset) / (batch * world))`, as with `drop_last=False`), and each step rank r takes
the r-th slice of that step's indices. On the last step the slices run past the end of the set;
the loop skips an empty batch with `continue` ("nothing to evaluate"), and each evaluated batch
sums its loss across ranks for the running average.

Hang class: ranks run different numbers of batches of the eval loop (the last batch is empty on
some ranks and skipped).
Label: D9
Odd ranks: 2
Launch: python 3
Held out: session 12c

With 20 samples, batch 4 and 3 ranks there are 2 steps: on step 1 rank 2's slice (20:24) is
empty, so it skips the step's all_reduce and waits in the barrier that ends the evaluation;
ranks 0 and 1 wait in the all_reduce of step 1's loss.
"""

import math
import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Linear(16, 3)
    xs, ys = torch.randn(20, 16), torch.randint(0, 3, (20,))
    batch = 4
    steps = math.ceil(len(xs) / (batch * world))
    seen = torch.zeros(1)
    running = 0.0
    for step in range(steps):
        lo = (step * world + rank) * batch
        x, y = xs[lo : lo + batch], ys[lo : lo + batch]
        if len(x) == 0:
            continue
        with torch.no_grad():
            loss = nn.functional.cross_entropy(model(x), y, reduction="sum").reshape(1)
        dist.all_reduce(loss)
        running += float(loss)
        seen += len(x)
    dist.barrier()  # every rank done evaluating before the totals
    dist.all_reduce(seen)
    if rank == 0:
        print(f"eval loss {running / float(seen):.4f} over {int(seen)} samples", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
