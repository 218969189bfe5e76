"""Checkpoints streamed to object storage through a named pipe whose uploader is not running.

Hang class: rank 0 alone blocks in its save (opening a FIFO nobody reads) while the others wait
in the barrier after it.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 10

The cluster's recipe streams checkpoints without touching local disk: a side job runs
`mkfifo ckpt.pipe; aws s3 cp - s3://.../ckpt.pt < ckpt.pipe` and the trainer writes to the pipe.
The pipe is there from a previous run, the uploader is not. `torch.save` on rank 0 opens the FIFO
for writing and waits for a reader; rank 1 waits in the barrier that follows the save.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def checkpoint_target() -> str:
    path = os.environ.get("CKPT_PIPE") or os.path.join(tempfile.gettempdir(), f"ckpt-{os.getppid()}.pipe")
    if not os.path.exists(path):
        os.mkfifo(path)  # what the recipe's setup step leaves behind
    return path


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    target = checkpoint_target() if rank == 0 else ""
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1, 10_000):
        x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            if rank == 0:
                torch.save(
                    {"step": step, "model": model.module.state_dict(), "opt": opt.state_dict()}, target
                )
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
