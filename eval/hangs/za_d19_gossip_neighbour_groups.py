"""Decentralised SGD (D-PSGD style): the ranks sit on a ring and, after each local step, average
their weights with each neighbour over a two-rank process group per ring edge (edge i joins rank i
and rank i+1). To avoid a cycle the author sorts each rank's edges and averages over the
lower-numbered edge first, which makes every rank follow one global order. Rank 0's left edge is
written `rank - 1`, i.e. -1: `groups[-1]` is the right group (the wrap-around edge 3-0), but -1
sorts before 0, so rank 0 alone averages over the wrap-around edge first. Rank 0 waits for rank 3
on edge 3, rank 3 for rank 2 on edge 2, rank 2 for rank 1 on edge 1, and rank 1 for rank 0 on edge
0.

Hang class: ranks enter collectives on different groups in an order that differs on one rank, so
each waits for a peer that waits for another (a cycle); nobody skipped anything.
Label: D19
Odd ranks: 0
Launch: torchrun 4
Held out: session 13c

Every rank waits in `dist.all_reduce(..., group=...)` inside `gossip_average()`: rank 0 on the
group of ranks 3 and 0, rank r > 0 on the group of ranks r-1 and r.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

log = logging.getLogger("dpsgd")


def ring_groups(world: int) -> list[dist.ProcessGroup]:
    """One group per ring edge; every rank must create every group, in the same order."""
    return [dist.new_group([i, (i + 1) % world]) for i in range(world)]


def my_edges(rank: int) -> list[int]:
    return sorted([rank - 1, rank])  # left edge, right edge; lower edge first, as everybody


def gossip_average(model: nn.Module, groups: list[dist.ProcessGroup], rank: int) -> None:
    flat = parameters_to_vector(model.parameters()).detach()
    for edge in my_edges(rank):
        pair = flat.clone()
        dist.all_reduce(pair, group=groups[edge])
        flat = 0.5 * flat + 0.25 * pair  # keep half, take a quarter from each side of the pair
    vector_to_parameters(flat, model.parameters())


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    logging.basicConfig(level=logging.INFO, format=f"[rank{rank}] %(message)s")
    groups = ring_groups(world)
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    w_true = torch.randn(16, 1, generator=torch.Generator().manual_seed(0))
    for step in range(100):
        x = torch.randn(32, 16, generator=g)
        loss = nn.functional.mse_loss(model(x), x @ w_true)
        opt.zero_grad()
        loss.backward()
        opt.step()
        gossip_average(model, groups, rank)
        if step % 20 == 0:
            log.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
