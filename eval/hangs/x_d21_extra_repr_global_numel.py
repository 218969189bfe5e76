"""A tensor-parallel linear layer written by hand (each rank holds a slice of the output
features) whose `extra_repr` reports the global parameter count, all-reducing the local counts so
that `print(model)` shows the real size. Rank 0 prints the model summary at start-up.

Hang class: a collective hidden in a method only one rank calls (`print(model)` under a rank
test reaches `extra_repr` through `Module.__repr__`).
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 12d

Rank 0 waits in the all_reduce inside `extra_repr`; rank 1 waits in the barrier before training.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class ColumnParallelLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int, world: int) -> None:
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.local = nn.Linear(d_in, d_out // world)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, y)
        return torch.cat(parts, dim=-1)

    def global_numel(self) -> int:
        n = torch.tensor([float(sum(p.numel() for p in self.parameters()))])
        dist.all_reduce(n)
        return int(n.item())

    def extra_repr(self) -> str:
        return f"in={self.d_in}, out={self.d_out}, params={self.global_numel()}"


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29631")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = nn.Sequential(ColumnParallelLinear(32, 64, world), nn.GELU(), nn.Linear(64, 8))
    if rank == 0:
        print(model, flush=True)
    dist.barrier()  # model built on every rank before training
    for _ in range(10):
        out = model(torch.randn(4, 32))
        out.sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
