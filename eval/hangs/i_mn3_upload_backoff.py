"""Rank 0 uploads each checkpoint to object storage with retries; the others wait in a barrier.

Hang class: rank 0 is slow, not dead: it sleeps in an exponential back-off between upload
attempts while the other ranks wait in the barrier after the checkpoint.
Label: MN3
Odd ranks: 0
Launch: torchrun 3
Held out: written in session 8 before the engine was changed, measured once

The "bucket" is a local folder that does not exist (a mount that is not there), so every attempt
fails and rank 0 backs off (60 s, then 120 s, ...) for far longer than anyone waits. Ranks 1 and
2 wait in `dist.barrier()` after `save_checkpoint`.
"""

import io
import os
import shutil
import time

import torch
import torch.distributed as dist
from torch import nn

BUCKET = "/mnt/checkpoints-bucket/run-17"


def upload(buffer: io.BytesIO, key: str, retries: int = 8, backoff: float = 60.0) -> None:
    for attempt in range(retries):
        try:
            with open(os.path.join(BUCKET, key), "wb") as handle:
                shutil.copyfileobj(buffer, handle)
            return
        except OSError as err:
            print(f"upload of {key} failed ({err}); retry {attempt + 1} in {backoff:.0f}s", flush=True)
            time.sleep(backoff)
            backoff *= 2
    raise RuntimeError(f"could not upload {key}")


def save_checkpoint(model: nn.Module, step: int) -> None:
    if dist.get_rank() == 0:
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        buffer.seek(0)
        upload(buffer, f"step-{step}.pt")
    dist.barrier()


def main() -> None:
    dist.init_process_group("gloo")
    model = nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(1, 10_000):
        loss = model(torch.randn(8, 16)).square().mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        if step % 5 == 0:
            save_checkpoint(model, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
