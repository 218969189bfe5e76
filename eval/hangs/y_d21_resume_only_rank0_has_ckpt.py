"""Resuming from the last checkpoint: the run directory is node-local scratch (`$TMPDIR`), rank 0
looks for `last.pt` there and, if it finds it, loads it and broadcasts the state to the others with
`broadcast_object_list`. The other ranks look in their own scratch, find nothing, and start from
scratch: they skip the broadcast.

Hang class: a collective behind a condition that differs per rank (the file exists only where
rank 0 looks), so one rank issues a broadcast the others never join.
Label: D21
Odd ranks: 0
Launch: python 3
Held out: session 13

Rank 0 waits in `broadcast_object_list` (the size broadcast); ranks 1 and 2 wait in the barrier
that ends the resume step.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def scratch_dir(rank: int) -> str:
    # Each "node" gets its own scratch; only the first node ran the previous job.
    base = os.path.join(tempfile.gettempdir(), f"resume-demo-node{rank}")
    os.makedirs(base, exist_ok=True)
    return base


def maybe_resume(model: nn.Module, opt: torch.optim.Optimizer, run_dir: str) -> int:
    path = os.path.join(run_dir, "last.pt")
    if os.path.exists(path):
        state = [torch.load(path, weights_only=False)] if dist.get_rank() == 0 else [None]
        dist.broadcast_object_list(state, src=0)
        model.load_state_dict(state[0]["model"])
        opt.load_state_dict(state[0]["opt"])
        start = int(state[0]["step"])
    else:
        start = 0
    dist.barrier()  # everyone resumed before the first step
    return start


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run_dir = scratch_dir(rank)
    if rank == 0:  # the previous job's checkpoint, left on node 0's scratch
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 120},
                   os.path.join(run_dir, "last.pt"))  # fmt: skip
    start = maybe_resume(model, opt, run_dir)
    for step in range(start, start + 50):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
