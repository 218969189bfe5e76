"""Checkpointing a ZeroRedundancyOptimizer: `consolidate_state_dict()` is called on rank 0 only.

Hang class: a collective (the optimizer's state gather) inside `if rank == 0:`.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 9

The save helper follows the usual "only the main process writes" rule, but
`ZeroRedundancyOptimizer.consolidate_state_dict(to=0)` is itself a collective every rank must call:
rank 0 waits in it for the shards of the others, while rank 1 went on to the next step and waits in
DDP's gradient all-reduce.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(path: str, model: nn.Module, opt: ZeroRedundancyOptimizer, step: int) -> None:
    if dist.get_rank() != 0:
        return
    opt.consolidate_state_dict(to=0)
    torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, path)


def main() -> None:
    dist.init_process_group("gloo")
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    ckpt = os.path.join(tempfile.gettempdir(), f"zero_{os.getpid()}.pt")
    for step in range(1, 10_000):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            save_checkpoint(ckpt, model, opt, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
