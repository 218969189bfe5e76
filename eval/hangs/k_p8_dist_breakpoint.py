"""`torch.distributed.breakpoint()` left in the training loop after a debugging session.

Hang class: a debugger prompt on one rank of a launched job; the others wait at its barrier.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 9b

The user followed the advice to break on one rank only and used torch's own helper, which opens
pdb on rank 0 and holds the other ranks in a barrier; the call was guarded by a step that the
run reaches after a few seconds, and nobody is at the terminal. Rank 0 waits at the pdb prompt,
rank 1 in the helper's barrier.
"""

import torch
import torch.distributed as dist
from torch import nn

DEBUG_STEP = 30


def main() -> None:
    dist.init_process_group("gloo")
    model = nn.Linear(10, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        loss = model(torch.randn(4, 10)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step == DEBUG_STEP:
            dist.breakpoint(rank=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
