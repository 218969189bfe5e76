"""On start, rank 0 finds a checkpoint from an earlier run and asks on the terminal whether to
resume from it (`sys.stdin.readline()`), "so a stale checkpoint is never picked up by mistake";
the answer is broadcast to the others.

Hang class: a rank held at a prompt nobody answers (a launched job's stdin is not the terminal).
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 12d

Rank 0 waits in `readline()` for an answer; rank 1 waits in the `broadcast_object_list` that
shares it.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def ask_resume(path: str) -> bool:
    sys.stdout.write(f"found {path}; resume from it? [y/N] ")
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower().startswith("y")


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(16, 4)
    ckpt = os.path.join(tempfile.gettempdir(), "x_p8_last.pt")
    if rank == 0 and not os.path.exists(ckpt):
        torch.save(model.state_dict(), ckpt)  # the earlier run's checkpoint
    decision = [False]
    if rank == 0 and os.path.exists(ckpt):
        decision[0] = ask_resume(ckpt)
    dist.broadcast_object_list(decision, src=0)
    if decision[0]:
        model.load_state_dict(torch.load(ckpt))
    for _ in range(10):
        t = torch.ones(4)
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
