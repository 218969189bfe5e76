"""The two-node command from the wiki (`torchrun --nnodes=2 --node-rank=0 ...`) started on one node only.

Hang class: the launcher waits in the rendezvous for a node that is never started; no worker runs.
Label: D2
Odd ranks:
Launch: torchrun 2 nnodes 2
Held out: written in session 8 before the engine was changed, measured once

The user ran the first node's line of a two-node recipe and forgot (or failed) to start the second
node. torchrun's agent waits for the second node's agent in the rendezvous; the script never runs.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(100):
        loss = model(torch.randn(2, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
