"""A contrastive term computed on "half the steps" with Python's `random`, seeded per rank.

Hang class: a collective behind a random draw that each rank makes differently.
Label: D19
Odd ranks: 1
Launch: torchrun 2
Held out: session 9c

The augmentation code seeds `random` with `seed + rank` so each rank crops differently; the
training step reuses the same `random.random() < 0.5` to add a cross-rank contrastive term,
whose embeddings are all-gathered from every rank. The ranks disagree at the first step: rank 1
draws the term and waits in `all_gather`, rank 0 skips it and waits in the barrier that ends
the step's logging.
"""

import os
import random

import torch
import torch.distributed as dist
from torch import nn

SEED = 17


def gather_embeddings(z: torch.Tensor) -> torch.Tensor:
    out = [torch.zeros_like(z) for _ in range(dist.get_world_size())]
    dist.all_gather(out, z.detach())
    return torch.cat(out)


def main() -> None:
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    random.seed(SEED + rank)
    encoder = nn.Linear(10, 4)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.01)
    for step in range(1000):
        x = torch.randn(8, 10)
        z = nn.functional.normalize(encoder(x), dim=1)
        loss = z.pow(2).sum(dim=1).mean()
        if random.random() < 0.5:
            everyone = gather_embeddings(z)
            loss = loss + torch.logsumexp(z @ everyone.T / 0.1, dim=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dist.barrier()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
