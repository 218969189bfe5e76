"""Rank 0 alone writes the full training state with `torch.save` to a network mount at the end of
each epoch; the others go straight on to the barrier that starts the next epoch.

Hang class: a rank held in a slow write to a shared disk while the others wait for it in the next
collective (they time out after the collective timeout, 30 min by default with gloo).
Label: MN3
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 12d

The mount stands in as a file object whose `write` takes a long time per chunk (a sleep stands for
the stalled NFS server). Rank 0 waits inside `torch.save`'s write; ranks 1 and 2 wait in the
barrier at the start of epoch 1.
"""

import io
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class NetworkMountFile(io.RawIOBase):
    """A file on a mount whose server is stalled: each write takes minutes."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "wb")  # noqa: SIM115

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[no-untyped-def, override]
        time.sleep(600)
        return self._f.write(b)


def save_checkpoint(state: dict, path: str) -> None:
    with NetworkMountFile(path) as f:
        torch.save(state, f)


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29617")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = os.path.join(tempfile.gettempdir(), "x_mn3_ckpt.pt")
    for epoch in range(3):
        dist.barrier()  # every rank starts the epoch together
        for _ in range(5):
            loss = model(torch.randn(16, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        if rank == 0:
            save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, ckpt)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3)
