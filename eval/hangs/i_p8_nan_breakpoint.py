"""A NaN guard that drops into the debugger, left in the training loop; one rank meets a bad batch.

Hang class: one rank sits at a pdb prompt nobody answers while the others wait in a collective.
Label: P8
Odd ranks: 1
Launch: torchrun 3
Held out: written in session 8 before the engine was changed, measured once

Rank 1's shard holds a record with an infinite feature; its loss becomes NaN at step 3 and the
guard calls `breakpoint()`. Under torchrun nobody types at that prompt: rank 1 waits reading
stdin, ranks 0 and 2 wait in the all_reduce of the loss.
"""

import math

import torch
import torch.distributed as dist
from torch import nn


def shard(rank: int, steps: int) -> list[torch.Tensor]:
    batches = [torch.randn(4, 6) for _ in range(steps)]
    if rank == 1:
        batches[3][2, 1] = math.inf  # a corrupt record in this rank's part of the data
    return batches


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, x in enumerate(shard(rank, 500)):
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        if torch.isnan(loss) or torch.isinf(loss):
            print(f"rank {rank}: non-finite loss at step {step}, inspect the batch", flush=True)
            breakpoint()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        report = loss.detach()
        dist.all_reduce(report)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
