"""A classification trainer pasted from a team template: `Trainer.save_checkpoint()` writes the
state dict, prunes old checkpoints and then "waits for everyone before going on", but the barrier
sits one indent too deep, under `if self.is_main:`. The save runs every `save_every` steps from
`_after_step()`, two calls below the training loop.

Hang class: a barrier inside a rank-0 test (buried in a method of a method of the loop), the
other ranks go on to the next step's gradient all-reduce.
Label: D21
Odd ranks: 0
Launch: torchrun 4
Held out: session 13b

Rank 0 waits in the barrier at the end of `save_checkpoint`; ranks 1-3 wait in the all_reduce of
the next step's gradients (`_sync_gradients`).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("trainer")


@dataclass
class TrainConfig:
    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    hidden: int = 32
    classes: int = 5
    save_every: int = 6
    keep_last: int = 2
    log_every: int = 5
    out_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="ckpt_"))


def parse_args() -> TrainConfig:
    parser = argparse.ArgumentParser(description="train the toy classifier")
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--save-every", type=int, default=TrainConfig.save_every)
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args()
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, save_every=args.save_every)
    if args.out_dir:
        cfg.out_dir = args.out_dir
    return cfg


def setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank{rank}] %(levelname)s %(message)s",
    )


class Encoder(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(16, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, hidden * 2), nn.GELU(), nn.Linear(hidden * 2, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.proj(x))
        return h + self.ff(h)


class Classifier(nn.Module):
    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.encoder = Encoder(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class SyntheticStream:
    def __init__(self, batch_size: int, classes: int, seed: int) -> None:
        self.batch_size = batch_size
        self.classes = classes
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        while True:
            x = torch.randn(self.batch_size, 16, generator=self.gen)
            y = torch.randint(0, self.classes, (self.batch_size,), generator=self.gen)
            yield x, y


class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        torch.manual_seed(0)
        self.model = Classifier(cfg.hidden, cfg.classes)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.loss_fn = nn.CrossEntropyLoss()
        self.step = 0
        self.saved: list[Path] = []
        self.data = SyntheticStream(cfg.batch_size, cfg.classes, seed=1234 + self.rank)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _sync_gradients(self) -> None:
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.world

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self._sync_gradients()
        self.opt.step()
        return loss.item()

    def _prune(self) -> None:
        while len(self.saved) > self.cfg.keep_last:
            old = self.saved.pop(0)
            old.unlink(missing_ok=True)

    def save_checkpoint(self) -> None:
        if self.is_main:
            path = Path(self.cfg.out_dir) / f"step_{self.step:06d}.pt"
            state = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "step": self.step}
            torch.save(state, path)
            self.saved.append(path)
            self._prune()
            log.info("saved %s", path)
            # make sure nobody reads a half-written checkpoint
            dist.barrier()

    def _after_step(self, loss: float) -> None:
        if self.step % self.cfg.log_every == 0:
            log.info("step %d loss %.4f", self.step, loss)
        if self.step % self.cfg.save_every == 0:
            self.save_checkpoint()

    def train(self) -> None:
        started = time.time()
        for x, y in self.data:
            loss = self._train_step(x, y)
            self.step += 1
            self._after_step(loss)
            if self.step >= self.cfg.steps:
                break
        log.info("done in %.1fs", time.time() - started)


def main() -> None:
    cfg = parse_args()
    dist.init_process_group("gloo")
    setup_logging(dist.get_rank())
    os.makedirs(cfg.out_dir, exist_ok=True)
    trainer = Trainer(cfg)
    trainer.train()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
