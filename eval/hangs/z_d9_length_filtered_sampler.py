"""A language-model fine-tune on a mixed corpus (news, wiki and code documents interleaved in the
manifest) with a hand-written `LengthFilteredSampler`: it shards the manifest by stride like
`DistributedSampler`, then drops the documents longer than `max_len` "so no rank pays for padding",
and reports `num_samples` (its `__len__`) from the list it kept. The manifest interleaves the three
sources, so every third document lands on the same rank, and the code files are the long ones.

Hang class: the loaders' lengths differ between ranks (each sampler counts its own filtered shard),
so the ranks run different numbers of steps. Written D22, relabelled D9 as `i_d9_bucket_sampler`.
Label: D9
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 13b

Rank 2 keeps 48 of its 80 documents (6 batches), ranks 0 and 1 all 80 (10 batches): rank 2 waits
in the barrier before validation, ranks 0 and 1 in their seventh step's gradient all_reduce.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

log = logging.getLogger("finetune")
SOURCES = ("news", "wiki", "code")


@dataclass
class FinetuneConfig:
    world_size: int = 3
    documents: int = 240
    max_len: int = 96
    batch_size: int = 8
    epochs: int = 2
    vocab: int = 64
    dim: int = 24
    lr: float = 5e-3
    port: str = "29653"


class MixedCorpus(Dataset):
    """Documents round-robin over the sources; code documents run long."""

    def __init__(self, n: int, vocab: int) -> None:
        self.sources = [SOURCES[i % 3] for i in range(n)]
        self.lengths = [40 + (i % 5) * 25 if self.sources[i] == "code" else 40 for i in range(n)]
        g = torch.Generator().manual_seed(3)
        self.tokens = [torch.randint(0, vocab, (length,), generator=g) for length in self.lengths]

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i][:40]


class LengthFilteredSampler(Sampler[int]):
    def __init__(self, lengths: list[int], max_len: int, rank: int, world: int, seed: int = 0) -> None:
        self.rank, self.world, self.seed, self.epoch = rank, world, seed, 0
        shard = list(range(rank, len(lengths), world))
        self.indices = [i for i in shard if lengths[i] <= max_len]
        self.num_samples = len(self.indices)
        log.info("rank %d keeps %d/%d documents", rank, self.num_samples, len(shard))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        order = list(self.indices)
        random.Random(self.seed + self.epoch).shuffle(order)
        return iter(order)

    def __len__(self) -> int:
        return self.num_samples


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Conv1d(dim, dim, kernel_size=3, padding=2)  # causal: trimmed below
        self.ff = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)
        )
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        h = h + self.mix(h.transpose(1, 2))[:, :, : tokens.shape[1]].transpose(1, 2)
        return self.out(h + self.ff(h))


class Finetuner:
    def __init__(self, cfg: FinetuneConfig, rank: int) -> None:
        self.cfg, self.rank = cfg, rank
        corpus = MixedCorpus(cfg.documents, cfg.vocab)
        self.sampler = LengthFilteredSampler(corpus.lengths, cfg.max_len, rank, cfg.world_size)
        self.loader = DataLoader(corpus, batch_size=cfg.batch_size, sampler=self.sampler)
        torch.manual_seed(0)
        self.model = TinyLM(cfg.vocab, cfg.dim)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)

    def average_gradients(self) -> None:
        for p in self.model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(self.cfg.world_size)

    def train_epoch(self, epoch: int) -> float:
        self.sampler.set_epoch(epoch)
        self.model.train()
        total = 0.0
        for tokens in self.loader:
            logits = self.model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, self.cfg.vocab), tokens[:, 1:].reshape(-1))
            self.opt.zero_grad()
            loss.backward()
            self.average_gradients()
            self.opt.step()
            total += loss.item()
        return total / max(1, len(self.loader))

    @torch.no_grad()
    def validate(self) -> float:
        dist.barrier()
        self.model.eval()
        tokens = torch.randint(0, self.cfg.vocab, (4, 40))
        logits = self.model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, self.cfg.vocab), tokens[:, 1:].reshape(-1))
        t = torch.tensor([loss.item()])
        dist.all_reduce(t)
        return t.item() / self.cfg.world_size

    def run(self) -> None:
        for epoch in range(self.cfg.epochs):
            train_loss = self.train_epoch(epoch)
            val = self.validate()
            if self.rank == 0:
                log.info("epoch %d train %.3f val %.3f ppl %.1f", epoch, train_loss, val, math.exp(val))


def worker(rank: int, cfg: FinetuneConfig) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s r{rank} %(message)s")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", cfg.port)
    dist.init_process_group("gloo", rank=rank, world_size=cfg.world_size)
    Finetuner(cfg, rank).run()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-len", type=int, default=FinetuneConfig.max_len)
    parser.add_argument("--epochs", type=int, default=FinetuneConfig.epochs)
    args = parser.parse_args()
    cfg = FinetuneConfig(max_len=args.max_len, epochs=args.epochs)
    mp.spawn(worker, args=(cfg,), nprocs=cfg.world_size, join=True)


if __name__ == "__main__":
    main()
