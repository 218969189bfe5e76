"""A recommendation-model trainer written for `python -m torch.distributed.launch`, which passed
`--local_rank N` to the script: argparse declares `--local_rank` with `default=0`, and
`setup_distributed()` builds the group from it (`rank=args.local_rank`, world size from the
environment). Run under torchrun, which sets `LOCAL_RANK` in the environment and passes no
argument, every worker keeps the default and joins the group as rank 0.

Hang class: the launcher's contract with the script (torchrun no longer passes `--local_rank`), so
the group never forms: rank 1's slot is never filled and every worker waits in
`init_process_group`.
Label: D1
Odd ranks: 1
Launch: torchrun 2
Held out: session 13b

Both workers wait in `init_process_group(..., rank=0, world_size=2)` inside `setup_distributed()`
(gloo's rendezvous waits for rank 1's address, which no worker publishes).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

logger = logging.getLogger("recsys")


@dataclass
class TrainingArguments:
    local_rank: int = 0
    users: int = 500
    items: int = 300
    factors: int = 16
    batch_size: int = 64
    epochs: int = 2
    lr: float = 0.01
    weight_decay: float = 1e-5
    seed: int = 42


def parse_args(argv: list[str] | None = None) -> TrainingArguments:
    parser = argparse.ArgumentParser(description="matrix factorisation with side MLP")
    parser.add_argument("--local_rank", type=int, default=0, help="set by the launcher")
    parser.add_argument("--epochs", type=int, default=TrainingArguments.epochs)
    parser.add_argument("--batch_size", type=int, default=TrainingArguments.batch_size)
    parser.add_argument("--lr", type=float, default=TrainingArguments.lr)
    parser.add_argument("--seed", type=int, default=TrainingArguments.seed)
    ns = parser.parse_args(argv)
    return TrainingArguments(
        local_rank=ns.local_rank, epochs=ns.epochs, batch_size=ns.batch_size, lr=ns.lr, seed=ns.seed
    )


def setup_distributed(args: TrainingArguments) -> tuple[int, int]:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        dist.init_process_group(
            backend="gloo", init_method="env://", rank=args.local_rank, world_size=world_size
        )
    logger.info("process %d of %d ready", args.local_rank, world_size)
    return args.local_rank, world_size


class Recommender(nn.Module):
    def __init__(self, users: int, items: int, factors: int) -> None:
        super().__init__()
        self.user = nn.Embedding(users, factors)
        self.item = nn.Embedding(items, factors)
        self.user_bias = nn.Embedding(users, 1)
        self.item_bias = nn.Embedding(items, 1)
        self.side = nn.Sequential(nn.Linear(2 * factors, factors), nn.ReLU(), nn.Linear(factors, 1))

    def forward(self, u: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        eu, ei = self.user(u), self.item(i)
        dot = (eu * ei).sum(-1, keepdim=True)
        return (dot + self.user_bias(u) + self.item_bias(i) + self.side(torch.cat([eu, ei], -1))).squeeze(-1)


class Interactions:
    def __init__(self, args: TrainingArguments, rank: int, world: int) -> None:
        g = torch.Generator().manual_seed(args.seed)
        n = 4096
        self.users = torch.randint(0, args.users, (n,), generator=g)
        self.items = torch.randint(0, args.items, (n,), generator=g)
        self.ratings = torch.randint(1, 6, (n,), generator=g).float()
        self.shard = torch.arange(rank, n, world)
        self.batch_size = args.batch_size

    def __iter__(self):
        for start in range(0, len(self.shard), self.batch_size):
            idx = self.shard[start : start + self.batch_size]
            yield self.users[idx], self.items[idx], self.ratings[idx]


class Trainer:
    def __init__(self, args: TrainingArguments, rank: int, world: int) -> None:
        self.args, self.rank, self.world = args, rank, world
        torch.manual_seed(args.seed)
        self.model = Recommender(args.users, args.items, args.factors)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.data = Interactions(args, rank, world)

    def _average(self) -> None:
        if self.world == 1:
            return
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= self.world

    def train(self) -> None:
        for epoch in range(self.args.epochs):
            total, n = 0.0, 0
            for u, i, r in self.data:
                self.opt.zero_grad()
                loss = nn.functional.mse_loss(self.model(u, i), r)
                loss.backward()
                self._average()
                self.opt.step()
                total, n = total + loss.item(), n + 1
            if self.rank == 0:
                logger.info("epoch %d rmse %.3f", epoch, (total / n) ** 0.5)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    rank, world = setup_distributed(args)
    Trainer(args, rank, world).train()
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
