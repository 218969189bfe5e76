"""A guard that skips the step when the loss is not finite, on the one rank whose batch overflows.

Hang class: one rank went NaN and left the step (no gradient all_reduce); the others wait for it.
Label: D20
Odd ranks: 1
Launch: torchrun 2
Held out: session 9b

The usual fp16-style guard `if not torch.isfinite(loss): continue`, applied per rank: rank 1's
shard has a sample with a huge value at step 30, its loss is inf, it skips the backward and the
gradient all_reduce and runs one step ahead; at the end of the epoch it waits in the barrier,
rank 0 in its last gradient all_reduce.
"""

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    params = list(model.parameters())
    for epoch in range(100):
        for step in range(50):
            x = torch.randn(8, 10)
            if rank == 1 and epoch == 0 and step == 30:
                x[3, 2] = 1e30  # a corrupt record in this rank's shard
            loss = model(x).pow(2).mean()
            if not torch.isfinite(loss):
                print(f"[rank {rank}] non-finite loss at step {step}, skipping", flush=True)
                continue
            opt.zero_grad()
            loss.backward()
            grads = torch.cat([p.grad.flatten() for p in params])
            dist.all_reduce(grads)
            torch.nn.utils.vector_to_parameters(grads / world, [p.grad for p in params])
            opt.step()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
