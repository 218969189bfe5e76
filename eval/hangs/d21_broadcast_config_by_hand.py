"""Rank 0 reads the run's config and broadcasts it; the other ranks forgot to receive it.

Hang class: a `broadcast_object_list` inside `if rank == 0:` (the else branch builds its own).
Label: D21
Odd ranks: 0
Launch: python 2

Started by hand, one `python` per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its
environment (a shell loop, no launcher). Rank 0 waits in `broadcast_object_list`; rank 1 goes on
to wrap the model in DDP and waits in its constructor's collectives.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def load_config(rank: int) -> dict[str, float]:
    if rank == 0:
        config = {"lr": 3e-4, "hidden": 64}
        box = [config]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return {"lr": 1e-3, "hidden": 64}


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    config = load_config(rank)
    model = DDP(nn.Linear(int(config["hidden"]), 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for _ in range(100):
        loss = model(torch.randn(4, int(config["hidden"]))).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
