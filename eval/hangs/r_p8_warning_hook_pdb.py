"""To find where a numerical warning comes from, the script replaces `warnings.showwarning` with a
hook that opens pdb at the warning ("break on warnings"), left in after debugging.

Hang class: a rank at a debugger prompt under the launcher, reached through a warning only that
rank's data raises; the other rank waits in the next collective.
Label: P8
Odd ranks: 1
Launch: torchrun 2
Held out: session 11c

At step 4 rank 1's batch has a constant feature column: the script's own check warns
(`RuntimeWarning`), the hook calls `pdb.set_trace()`, and pdb waits on the launcher's stdin; rank 0
waits in the gradient `all_reduce`.
"""

import pdb
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def break_on_warning(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    print(f"{filename}:{lineno}: {category.__name__}: {message}", flush=True)
    pdb.set_trace()


warnings.showwarning = break_on_warning
warnings.simplefilter("always", RuntimeWarning)  # every occurrence, not once per line


def standardise(x: torch.Tensor) -> torch.Tensor:
    std = x.std(dim=0)
    if bool((std == 0).any()):
        warnings.warn("constant feature column in batch; standardising divides by zero", RuntimeWarning, stacklevel=2)
        std = std.clamp_min(1e-6)
    return (x - x.mean(dim=0)) / std


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(200):
        x = torch.randn(16, 5)
        if rank == 1 and step == 4:
            x[:, 2] = 3.0  # a sensor stuck at one value in this rank's shard
        loss = model(standardise(x)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
