"""Evaluation of a multi-label tagger: each rank scores its shard and keeps per-class error details,
then the ranks merge them with `dist.all_gather_object` for the report. The per-class breakdown is
a `defaultdict(lambda: ...)` created lazily, the first time a rare class is mispredicted. A lambda
does not pickle, so on the rank that met the rare class `all_gather_object` raises while pickling,
before it sends anything; the report code catches it ("details are best effort") and goes on to
the barrier before the next epoch. The other ranks wait in the gather.

Hang class: a collective skipped on one rank because an exception raised just before it was
swallowed by an `except` that carries on.
Label: D19
Odd ranks: 1
Launch: mp.spawn 3
Held out: session 13c

Ranks 0 and 2 wait in `all_gather_object` (inside `merge_details`); rank 1 caught the pickling
error there and waits in `dist.barrier()` at the end of `evaluate()`.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

log = logging.getLogger("tagger")

WORLD = 3
CLASSES = 12
RARE = 11


def shard(rank: int, n: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(n, 20, generator=g)
    y = (torch.rand(n, CLASSES, generator=g) > 0.7).float()
    y[:, RARE] = 0.0
    if rank == 1:
        y[7, RARE] = 1.0  # the one rare label in the whole eval set
    return x, y


class ErrorBook:
    """Counts false positives / negatives per class; rare classes get a detailed breakdown."""

    def __init__(self) -> None:
        self.fp = torch.zeros(CLASSES)
        self.fn = torch.zeros(CLASSES)
        self.details: dict[int, Any] = {}

    def add(self, pred: torch.Tensor, y: torch.Tensor, ids: range) -> None:
        self.fp += ((pred == 1) & (y == 0)).sum(0)
        self.fn += ((pred == 0) & (y == 1)).sum(0)
        for row, sample in zip((pred == 0) & (y == 1), ids):
            for c in row.nonzero().flatten().tolist():
                if c == RARE:
                    book = self.details.setdefault(c, defaultdict(lambda: {"count": 0, "ids": []}))
                    book["missed"]["count"] += 1
                    book["missed"]["ids"].append(sample)


def merge_details(book: ErrorBook) -> list[dict[int, Any]] | None:
    gathered: list[Any] = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(gathered, book.details)
    except Exception as exc:  # the breakdown is best effort, never fail the eval over it
        log.warning("could not merge error details: %s", exc)
        return None
    return gathered


def evaluate(model: nn.Module, rank: int) -> dict[str, float]:
    model.eval()
    x, y = shard(rank)
    book = ErrorBook()
    with torch.no_grad():
        for i in range(0, len(x), 8):
            pred = (model(x[i : i + 8]).sigmoid() > 0.5).float()
            book.add(pred, y[i : i + 8], range(i, i + 8))
    counts = torch.stack([book.fp, book.fn])
    dist.all_reduce(counts)
    details = merge_details(book)
    if rank == 0 and details is not None:
        log.info("rare-class details from %d ranks", len(details))
    dist.barrier()
    model.train()
    return {"fp": counts[0].sum().item(), "fn": counts[1].sum().item()}


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, rank: int, epoch: int) -> None:
    g = torch.Generator().manual_seed(1000 * epoch + rank)
    for _ in range(6):
        x = torch.randn(8, 20, generator=g)
        y = (torch.rand(8, CLASSES, generator=g) > 0.7).float()
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= WORLD
        opt.step()


def run(rank: int) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{rank}] %(message)s")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29671")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(5):
        train_epoch(model, opt, rank, epoch)
        metrics = evaluate(model, rank)
        if rank == 0:
            log.info("epoch %d %s", epoch, metrics)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, nprocs=WORLD, join=True)
