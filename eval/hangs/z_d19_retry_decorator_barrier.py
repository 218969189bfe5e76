"""A regression trainer with a `@retry` decorator from the team's utils, put on
`Trainer.check_step()` after gloo timeouts ("RuntimeError: ... Timed out") were seen on a busy
cluster: the method waits at a barrier so every rank has finished `backward()`, then checks the
local gradient norm and raises `RuntimeError` on a spike. The decorator retries on
`RuntimeError`, so a spike on one rank re-runs the whole method, barrier included.

Hang class: one rank issues a collective once more (a retry around a collective, the retry
triggered by that rank's own data), the others have gone on to the gradient all_reduce.
Label: D19
Odd ranks: 1
Launch: python 3
Held out: session 13b

Rank 1's fourth batch is scaled by 1e4 (a corrupt shard): its gradient norm crosses the limit, the
decorator calls `check_step()` again and it waits in the barrier; ranks 0 and 2 wait in the
all_reduce of `_average_gradients`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")
logger = logging.getLogger("reg")


def retry(times: int = 3, on: tuple[type[BaseException], ...] = (RuntimeError,), delay: float = 0.1):
    """Re-run a flaky call (collectives time out now and then on the shared cluster)."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def inner(*args, **kwargs) -> T:
            for attempt in range(1, times + 1):
                try:
                    return fn(*args, **kwargs)
                except on as err:
                    if attempt == times:
                        raise
                    logger.warning("%s failed (%s), attempt %d/%d", fn.__name__, err, attempt, times)
                    time.sleep(delay * attempt)
            raise AssertionError("unreachable")

        return inner

    return wrap


@dataclass
class Args:
    steps: int = 50
    batch_size: int = 32
    features: int = 12
    hidden: int = 48
    lr: float = 1e-3
    grad_limit: float = 1e3


def get_args() -> Args:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=Args.steps)
    p.add_argument("--batch-size", type=int, default=Args.batch_size)
    p.add_argument("--grad-limit", type=float, default=Args.grad_limit)
    a = p.parse_args()
    return Args(steps=a.steps, batch_size=a.batch_size, grad_limit=a.grad_limit)


class ResidualBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin2(self.act(self.lin1(x)))


class Regressor(nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.stem = nn.Linear(features, hidden)
        self.blocks = nn.Sequential(ResidualBlock(hidden), ResidualBlock(hidden))
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.stem(x))).squeeze(-1)


def shard_batches(rank: int, args: Args):
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.features, generator=g)
        y = x.sum(dim=1)
        if rank == 1 and step == 3:
            x = x * 1e4  # the corrupt shard
        yield x, y


class Trainer:
    def __init__(self, args: Args, rank: int, world: int) -> None:
        self.args, self.rank, self.world = args, rank, world
        torch.manual_seed(0)
        self.model = Regressor(args.features, args.hidden)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.step = 0

    @retry(times=3, on=(RuntimeError,))
    def check_step(self) -> float:
        dist.barrier()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float("inf")).item()
        if norm > self.args.grad_limit:
            raise RuntimeError(f"gradient spike: {norm:.1f} at step {self.step}")
        return norm

    def _average_gradients(self) -> None:
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= self.world

    def train(self) -> None:
        for x, y in shard_batches(self.rank, self.args):
            self.opt.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            norm = self.check_step()
            self._average_gradients()
            self.opt.step()
            self.step += 1
            if self.rank == 0 and self.step % 10 == 0:
                logger.info("step %d loss %.4f grad-norm %.2f", self.step, loss.item(), norm)


def main() -> None:
    args = get_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s rank{rank}: %(message)s")
    dist.init_process_group(backend="gloo", init_method="env://", rank=rank, world_size=world)
    Trainer(args, rank, world).train()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
