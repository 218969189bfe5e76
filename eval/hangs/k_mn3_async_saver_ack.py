"""Rank 0 hands each checkpoint to a background saver process and waits for its acknowledgement.

Hang class: the main rank blocks on a queue whose writer died, inside the checkpoint barrier.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 9b

To keep the training loop off the disk, rank 0 starts a saver process and sends it state dicts
through a multiprocessing queue, then waits for "saved" before the barrier that lets the others
go on. The saver fails on its first item (the checkpoint folder is not there) and exits; rank 0
waits in `ack.get()` with no timeout, rank 1 in the barrier.
"""

import multiprocessing as mp
import os

import torch
import torch.distributed as dist
from torch import nn


def saver(jobs: "mp.Queue", ack: "mp.Queue") -> None:
    while True:
        step, state = jobs.get()
        torch.save(state, os.path.join("/nonexistent/ckpt", f"step{step}.pt"))
        ack.put(step)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(20, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if rank == 0:
        ctx = mp.get_context("spawn")
        jobs, ack = ctx.Queue(), ctx.Queue()
        ctx.Process(target=saver, args=(jobs, ack), daemon=True).start()
    for step in range(1, 1001):
        loss = model(torch.randn(16, 20)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 25 == 0:
            if rank == 0:
                jobs.put((step, {k: v.clone() for k, v in model.state_dict().items()}))
                ack.get()  # the file is on disk before anyone goes on
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
