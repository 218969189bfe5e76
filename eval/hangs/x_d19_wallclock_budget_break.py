"""Training under a wall-clock budget ("stop after N seconds so the job ends before the
allocation does"): each rank starts its own clock after its setup and leaves the loop with `break`
once its own elapsed time passes the budget. Rank 0 builds the vocabulary before starting its
clock, so its budget ends later than the others'.

Hang class: a rank-local decision to leave the training loop (the ranks read their own clocks).
Label: D19
Odd ranks: 1
Launch: python 2
Held out: session 12d

Rank 1 passes the budget first, breaks out and waits in the barrier before the final save;
rank 0 waits in the gradient all_reduce of its next step. (First written for 3 ranks: ranks 1
and 2 read their clocks a step apart, so which of them broke first was left to timing.)
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn

BUDGET_S = 2.0


def build_vocab() -> dict[str, int]:
    time.sleep(1.5)  # reading the corpus once
    return {f"tok{i}": i for i in range(1000)}


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if rank == 0:
        vocab = build_vocab()
        print(f"vocab {len(vocab)}", flush=True)
    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.monotonic()
    step = 0
    while True:
        if time.monotonic() - start > BUDGET_S:
            break
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        time.sleep(0.05)
        step += 1
    dist.barrier()  # every rank done before the final save
    print(f"rank {rank} stopped after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
