"""A text-regression trainer with hooks: at the start of each epoch the `SampleLogger` hook logs
the shape and a preview of "the next batch" so the run log shows what the model sees. It does so
by calling `next()` on the trainer's live iterator, on the main process only (the logger is only
registered there). The batch it takes is never trained on, and rank 0's epoch is one step short.

Hang class: ranks run different numbers of batches in the epoch (one batch eaten by a logging
hook on one rank), so the rank that ran out first waits in the end-of-epoch collective.
Label: D9
Odd ranks: 0
Launch: python 2
Held out: session 13b

Rank 0 leaves the epoch loop one step early and waits in the barrier that opens `_end_epoch`;
rank 1 waits in its last step's gradient all_reduce (`_allreduce_grads`).
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import Iterator, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

logger = logging.getLogger(__name__)


@dataclass
class Config:
    epochs: int = 3
    batch_size: int = 8
    samples: int = 96
    vocab: int = 50
    dim: int = 16
    lr: float = 1e-2


class ToyText(Dataset):
    def __init__(self, n: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(7)
        self.tokens = torch.randint(0, vocab, (n, 12), generator=g)
        self.target = torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[i], self.target[i]


class BagModel(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.emb(tokens)).squeeze(-1)


class Hook(Protocol):
    def on_epoch_start(self, trainer: "Trainer", epoch: int) -> None: ...


class SampleLogger:
    """Logs what the next batch looks like, once per epoch."""

    def on_epoch_start(self, trainer: "Trainer", epoch: int) -> None:
        tokens, target = next(trainer.batches)
        logger.info(
            "epoch %d: batch %s, first row %s, target mean %.3f",
            epoch,
            tuple(tokens.shape),
            tokens[0, :6].tolist(),
            target.mean().item(),
        )


class Trainer:
    def __init__(self, cfg: Config, model: nn.Module, loader: DataLoader, hooks: list[Hook]) -> None:
        self.cfg = cfg
        self.model = model
        self.loader = loader
        self.hooks = hooks
        self.opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        self.batches: Iterator = iter(())
        self.world = dist.get_world_size()

    def _flat_grads(self) -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])

    def _allreduce_grads(self) -> None:
        flat = self._flat_grads()
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p in self.model.parameters():
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p))
            offset += n

    def _step(self, tokens: torch.Tensor, target: torch.Tensor) -> float:
        self.opt.zero_grad()
        loss = nn.functional.mse_loss(self.model(tokens), target)
        loss.backward()
        self._allreduce_grads()
        self.opt.step()
        return loss.item()

    def _end_epoch(self, epoch: int, total: float, steps: int) -> None:
        dist.barrier()  # every rank done with the epoch before the summary
        stats = torch.tensor([total, float(steps)])
        dist.all_reduce(stats)
        logger.info("epoch %d mean loss %.4f", epoch, (stats[0] / stats[1]).item())

    def fit(self) -> None:
        for epoch in range(self.cfg.epochs):
            self.loader.sampler.set_epoch(epoch)
            self.batches = iter(self.loader)
            for hook in self.hooks:
                hook.on_epoch_start(self, epoch)
            total, steps = 0.0, 0
            for tokens, target in self.batches:
                total += self._step(tokens, target)
                steps += 1
            self._end_epoch(epoch, total, steps)


def build(cfg: Config, rank: int) -> Trainer:
    data = ToyText(cfg.samples, cfg.vocab)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=cfg.batch_size, sampler=sampler)
    torch.manual_seed(0)
    model = BagModel(cfg.vocab, cfg.dim)
    hooks: list[Hook] = [SampleLogger()] if rank == 0 else []
    return Trainer(cfg, model, loader, hooks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=Config.epochs)
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    args = parser.parse_args()
    cfg = Config(epochs=args.epochs, batch_size=args.batch_size)
    rank = int(os.environ["RANK"])
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(message)s")
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    build(cfg, rank).fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
