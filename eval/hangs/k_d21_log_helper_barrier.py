"""A logging helper that waits for the other ranks before it writes, called from rank 0 only.

Hang class: a barrier hidden in a helper that only the main process calls.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 9b

`log_to_file` was written for "all ranks call it, rank 0 writes" and syncs first so the file holds
every rank's step; later the call moved under `if is_main:` to stop the duplicated console lines.
Rank 0 waits in the helper's barrier; rank 1 goes on to the next step's gradient all_reduce.
"""

import os

import torch
import torch.distributed as dist
from torch import nn


def log_to_file(path: str, step: int, loss: float) -> None:
    dist.barrier()  # every rank has finished the step before the line is written
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{step}\t{loss:.4f}\n")


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    is_main = rank == 0
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))
    log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "train_log.tsv")
    for step in range(1000):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.cat([p.grad.flatten() for p in model.parameters()], out=flat)
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        torch.nn.utils.vector_to_parameters(flat, [p.grad for p in model.parameters()])
        opt.step()
        if is_main and step % 20 == 0:
            log_to_file(log_path, step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
