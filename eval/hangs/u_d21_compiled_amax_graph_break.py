"""A `torch.compile`d model whose forward rescales activations when their absolute maximum passes a
clip value, with the scale agreed across ranks (`global_amax`, kept out of the graph with
`torch.compiler.disable`). The test on the activations' values is data-dependent: Dynamo breaks
the graph there, and only a rank whose batch has outliers takes the branch.

Hang class: a collective reached only by the ranks whose data take a branch (a graph break on one
rank only); the others go on without it.
Label: D21
Odd ranks: 1
Launch: torchrun 2
Held out: session 12

Rank 1's shard holds a batch of sensor readings with a spike (x 1e3) at step 30: rank 1 waits in
the all_reduce inside `global_amax`, called from the compiled forward; rank 0 finished its epoch
and waits in the barrier before averaging parameters.
"""

import torch
import torch.distributed as dist
from torch import nn


@torch.compiler.disable
def global_amax(h: torch.Tensor) -> torch.Tensor:
    amax = h.detach().abs().amax().reshape(1)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX)
    return amax


class ClippedMLP(nn.Module):
    def __init__(self, clip: float = 50.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 1)
        self.clip = clip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if h.abs().amax() > self.clip:
            h = h / global_amax(h) * self.clip
        return self.fc2(torch.relu(h))


def average_parameters(model: nn.Module) -> None:
    dist.barrier()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= dist.get_world_size()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = ClippedMLP()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for epoch in range(3):
        for step in range(60):
            x = torch.randn(16, 8, generator=gen)
            if rank == 1 and step == 30:
                x = x * 1e3
            loss = nn.functional.mse_loss(compiled(x), x.sum(-1, keepdim=True).clamp(-5, 5))
            opt.zero_grad()
            loss.backward()
            opt.step()
        average_parameters(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
