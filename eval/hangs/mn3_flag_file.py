"""Rank 0 preprocesses the data and drops a flag file; the other ranks poll for it.

Hang class: a rank stuck in the user's own wait loop (`while not os.path.exists(flag)`), outside
any collective, while the rank that went on waits in one.
Label: MN3
Odd ranks: 1
Launch: torchrun 2

The flag's name carries the rank that writes it (a copy-paste slip): rank 0 writes `ready.0`, rank 1
polls for `ready.1` forever, sleeping; rank 0 went on and waits in the DDP constructor's
collectives.
"""

import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def prepare_data(cache: str, rank: int) -> str:
    flag = os.path.join(cache, f"ready.{rank}")
    if rank == 0:
        torch.save(torch.randn(256, 8), os.path.join(cache, "train.pt"))
        open(flag, "w").close()
    else:
        while not os.path.exists(flag):
            time.sleep(0.5)
    return os.path.join(cache, "train.pt")


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cache = os.path.join(tempfile.gettempdir(), f"prep-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}")
    os.makedirs(cache, exist_ok=True)
    data = torch.load(prepare_data(cache, rank))
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(0, len(data), 16):
        loss = model(data[i : i + 16]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
