"""Tensor- and data-parallel groups of all four ranks; the last pipeline stage reduces in the other order.

Hang class: two process groups, ranks enter their collectives in different orders.
Label: D19
Odd ranks: 3
Launch: torchrun 4
Held out: written in session 8 before the engine was changed, measured once

A "metrics" group (all ranks, gloo) is created next to the world group. Each step every rank
all-reduces its gradients on the world group, then the loss on the metrics group; rank 3, the
last stage, "logs first" and reduces the loss on the metrics group before its gradients. Rank 3
waits in the metrics group's all_reduce, ranks 0-2 in the world group's.
"""

import torch
import torch.distributed as dist
from torch import nn


class Stage:
    def __init__(self, rank: int, world: int, metrics_group: dist.ProcessGroup) -> None:
        self.model = nn.Linear(8, 8)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.is_last = rank == world - 1
        self.metrics_group = metrics_group

    def sync_grads(self) -> None:
        for p in self.model.parameters():
            dist.all_reduce(p.grad)

    def log_loss(self, loss: torch.Tensor) -> float:
        value = loss.detach().clone()
        dist.all_reduce(value, group=self.metrics_group)
        return float(value) / dist.get_world_size()

    def step(self) -> float:
        loss = self.model(torch.randn(4, 8)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        if self.is_last:
            mean = self.log_loss(loss)
            self.sync_grads()
        else:
            self.sync_grads()
            mean = self.log_loss(loss)
        self.opt.step()
        return mean


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    metrics_group = dist.new_group(list(range(world)), backend="gloo")
    stage = Stage(rank, world, metrics_group)
    for _ in range(1000):
        stage.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
