"""A training function whose `finally` waits for the other ranks before cleaning up.

Hang class: one rank crashed, and its cleanup barrier keeps it alive while the others wait for it.
Label: D20
Odd ranks: 1
Launch: python 3
Held out: session 9b

Started once per rank from a shell loop. `train()` ends with `finally: dist.barrier()` so that
rank 0 deletes the scratch folder only after every rank is done with it. Rank 1 hits a bad record
(a KeyError in its preprocessing) at step 40; the exception goes up through the `finally`, where
rank 1 waits in the barrier; ranks 0 and 2 wait in the next gradient all_reduce. The traceback is
never printed because the `finally` never ends.
"""

import os

import torch
import torch.distributed as dist
from torch import nn


def record(rank: int, step: int) -> dict[str, torch.Tensor]:
    rec = {"x": torch.randn(8, 6), "y": torch.randn(8, 1)}
    if rank == 1 and step == 40:
        del rec["y"]  # the malformed line in rank 1's shard
    return rec


def train(rank: int, world: int) -> None:
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        for step in range(10_000):
            rec = record(rank, step)
            loss = nn.functional.mse_loss(model(rec["x"]), rec["y"])
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
    finally:
        dist.barrier()  # nobody removes the scratch folder while another rank still reads it
        if rank == 0:
            print("cleaning up scratch", flush=True)


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    train(rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
