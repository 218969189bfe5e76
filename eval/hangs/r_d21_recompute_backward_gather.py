"""Long-sequence attention with a hand-written autograd Function for the keys: forward is local,
backward all_gathers every rank's key gradient and sums it (the keys are shared across the
sequence-parallel group), the way activation-checkpointing code issues its collectives again
while recomputing in backward.

Hang class: a collective issued from `backward()` only on ranks whose batch took the long-sequence
branch; the other rank's batch was short, its backward issued none, and it went on to the
gradient all_reduce.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 11c

Batches are bucketed by length per rank; at the fourth step rank 0's batch is 64 long (over
`LONG`), rank 1's 40. Rank 0 waits in `GatherKeys.backward`'s `all_gather` under
`loss.backward()`; rank 1 waits in the gradient `all_reduce`.
"""

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

LONG = 48


class GatherKeys(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, k: torch.Tensor) -> torch.Tensor:
        return k.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        grad = grad.contiguous()
        parts = [torch.empty_like(grad) for _ in range(world)]
        dist.all_gather(parts, grad)  # recompute-style: sum every rank's contribution
        return torch.stack(parts).sum(0) / world


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        if x.shape[1] > LONG:
            k = GatherKeys.apply(k)
        att = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
        return att @ v


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Block(16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lengths = {0: [16, 24, 32, 64, 16], 1: [16, 24, 32, 40, 16]}[rank]  # bucketed per rank
    for epoch in range(20):
        for length in lengths:
            x = torch.randn(2, length, 16)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
