"""An image-classification trainer with a `CheckpointManager` copied from a cluster template: before
rank 0 writes, `_ensure_space()` waits for the checkpoint volume to have `min_free_gb` free ("the
cleanup cron frees space every hour"), polling once a minute. The other ranks wait in the barrier
after the save, as they should. On this machine's disk the threshold is never met, and nothing
on the others' side says why they wait: the group's timeout (30 minutes) is all that will end it.

Hang class: rank 0 alone is held in non-collective work (a wait on the file system) inside the
save while the others sit in the barrier; the collective timeout hides it.
Label: MN3
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 13b

Rank 0 sleeps in `_ensure_space`'s polling loop (under `save()` under `on_epoch_end()`); ranks 1
and 2 wait in the barrier at the end of `on_epoch_end()`.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

log = logging.getLogger("imgcls")


@dataclass
class RunConfig:
    world_size: int = 3
    epochs: int = 4
    steps_per_epoch: int = 6
    batch_size: int = 4
    image: int = 16
    classes: int = 10
    lr: float = 0.05
    ckpt_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="imgcls_"))
    min_free_gb: float = 2048.0  # template default: room for the 70B run's optimizer state
    poll_s: float = 60.0
    port: str = "29657"


class ConvBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.bn(self.conv(x))))


class SmallCNN(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(ConvBlock(3, 8), ConvBlock(8, 16))
        self.classifier = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


class CheckpointManager:
    def __init__(self, cfg: RunConfig) -> None:
        self.dir = Path(cfg.ckpt_dir)
        self.min_free = cfg.min_free_gb * 2**30
        self.poll_s = cfg.poll_s

    def _ensure_space(self) -> None:
        while (free := shutil.disk_usage(self.dir).free) < self.min_free:
            log.warning("only %.1f GiB free on %s, waiting for cleanup", free / 2**30, self.dir)
            time.sleep(self.poll_s)

    def save(self, epoch: int, model: nn.Module, opt: torch.optim.Optimizer) -> Path:
        self._ensure_space()
        path = self.dir / f"epoch{epoch:03d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
        os.replace(tmp, path)
        return path


class Trainer:
    def __init__(self, cfg: RunConfig, rank: int) -> None:
        self.cfg, self.rank = cfg, rank
        torch.manual_seed(0)
        self.model = SmallCNN(cfg.classes)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9, nesterov=True)
        self.ckpt = CheckpointManager(cfg)
        self.gen = torch.Generator().manual_seed(10 + rank)

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.cfg.batch_size, 3, self.cfg.image, self.cfg.image, generator=self.gen)
        y = torch.randint(0, self.cfg.classes, (self.cfg.batch_size,), generator=self.gen)
        return x, y

    def _all_reduce_grads(self) -> None:
        grads = [p.grad for p in self.model.parameters()]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        flat /= self.cfg.world_size
        torch.nn.utils.vector_to_parameters(flat, grads)

    def train_epoch(self) -> float:
        self.model.train()
        total = 0.0
        for _ in range(self.cfg.steps_per_epoch):
            x, y = self._batch()
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self._all_reduce_grads()
            self.opt.step()
            total += loss.item()
        return total / self.cfg.steps_per_epoch

    def on_epoch_end(self, epoch: int, loss: float) -> None:
        if self.rank == 0:
            path = self.ckpt.save(epoch, self.model, self.opt)
            log.info("epoch %d loss %.3f saved %s", epoch, loss, path)
        dist.barrier()

    def fit(self) -> None:
        for epoch in range(self.cfg.epochs):
            loss = self.train_epoch()
            self.on_epoch_end(epoch, loss)


def run(rank: int, cfg: RunConfig) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank={rank} %(message)s")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = cfg.port
    dist.init_process_group("gloo", rank=rank, world_size=cfg.world_size)
    try:
        Trainer(cfg, rank).fit()
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=RunConfig.epochs)
    parser.add_argument("--ckpt-dir", default=None)
    args = parser.parse_args()
    cfg = RunConfig(epochs=args.epochs)
    if args.ckpt_dir:
        cfg.ckpt_dir = args.ckpt_dir
    mp.spawn(run, args=(cfg,), nprocs=cfg.world_size, join=True)


if __name__ == "__main__":
    main()
