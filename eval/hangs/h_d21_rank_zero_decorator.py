"""A `@rank_zero_only` decorator around a checkpoint function that syncs in a barrier.

Hang class: a collective inside a function that a decorator runs on rank 0 only.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: written after the first fixes, measured once

`save_checkpoint` waits in `dist.barrier()` "so every rank sees the file", but the decorator
runs it on rank 0 only; rank 1 goes on training and waits in DDP's all-reduce inside
`backward()`.
"""

import functools
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def rank_zero_only(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if dist.get_rank() == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped


@rank_zero_only
def save_checkpoint(model: nn.Module, step: int) -> None:
    path = os.path.join(tempfile.gettempdir(), f"ckpt_{step}.pt")
    torch.save(model.state_dict(), path)
    dist.barrier()


def main() -> None:
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, 500):
        loss = model(torch.randn(4, 6)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            save_checkpoint(model, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
