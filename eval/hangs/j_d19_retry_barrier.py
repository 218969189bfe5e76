"""A retry wrapper around "sync, then publish the checkpoint": the publish fails once on rank 0 and the barrier runs again.

Hang class: one rank calls a collective more times than the others (a retry loop around it).
Label: D19
Odd ranks: 0
Launch: torchrun 2
Held out: session 9

`sync_and_publish` waits for every rank at a barrier, then rank 0 moves the new checkpoint into
place. The first move fails (the `published/` folder does not exist yet); the retry handler
creates it and calls the whole function again, barrier included. Rank 0 waits in that second
barrier; rank 1 went on to the next step and waits in DDP's gradient all-reduce.
"""

import os
import tempfile
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

OUT = os.path.join(tempfile.gettempdir(), f"run_{os.getppid()}")


def with_retry(fn: Callable[[], None], attempts: int = 3) -> None:
    for attempt in range(attempts):
        try:
            fn()
            return
        except OSError as err:
            print(f"attempt {attempt} failed: {err}; retrying", flush=True)
            os.makedirs(os.path.join(OUT, "published"), exist_ok=True)
            time.sleep(0.2)
    raise RuntimeError("giving up")


def sync_and_publish(model: nn.Module, step: int) -> None:
    dist.barrier()
    if dist.get_rank() == 0:
        tmp = os.path.join(OUT, f"step{step}.pt")
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, os.path.join(OUT, "published", "latest.pt"))


def main() -> None:
    dist.init_process_group("gloo")
    os.makedirs(OUT, exist_ok=True)
    model = DDP(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1, 5000):
        loss = model(torch.randn(32, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            with_retry(lambda: sync_and_publish(model, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
