"""The forum answer "put `import pdb; pdb.set_trace()` under `if rank == 0:`" applied to look at
the gradients after the first backward.

Hang class: a debugger prompt on one rank of a multi-process job.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 11d

Rank 0 sits at pdb's prompt (torchrun's stdin, still open); rank 1 has gone on to step 1
and waits in the gradient `all_reduce`.
"""

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(500):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if step == 0 and rank == 0:
            import pdb

            pdb.set_trace()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
