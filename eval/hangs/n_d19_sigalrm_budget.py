"""A wall-clock budget enforced with SIGALRM, whose handler saves and syncs the ranks.

Hang class: a collective issued from a signal handler; the timer fires on one rank between two
collectives and that rank enters the handler's barrier while the other is in a gradient
all-reduce (and the other's own alarm can never run: its thread is blocked in C++).
Label: D19
Odd ranks: 1
Launch: torchrun 2
Held out: session 10

Each rank arms `signal.setitimer` when it is ready to train ("stop cleanly before the
allocation ends"). Rank 0 also writes the run's config file first, so it arms later; rank 1's
alarm fires first, in the middle of its training step, and its handler calls `dist.barrier()`
before saving. Rank 0 waits in the gradient all_reduce. Rank 0's alarm fires too, but Python runs
handlers only between bytecodes, and rank 0's main thread is inside the all_reduce.
"""

import json
import os
import signal
import sys
import tempfile
import time
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn

BUDGET_S = float(os.environ.get("TIME_BUDGET_S", "6"))

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def on_budget(signum: int, frame: FrameType | None) -> None:
    dist.barrier()  # let every rank finish its step before the save
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "budget-ckpt.pt"))
    dist.destroy_process_group()
    sys.exit(0)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        with open(os.path.join(tempfile.gettempdir(), "run-config.json"), "w") as f:
            json.dump({"budget_s": BUDGET_S, "world": world}, f)
        time.sleep(3.0)  # also syncs the config to shared storage
    signal.signal(signal.SIGALRM, on_budget)
    signal.setitimer(signal.ITIMER_REAL, BUDGET_S)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _step in range(10**9):
        x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
