"""Multi-task pre-training (masked-token regression and a contrastive task with in-batch negatives
gathered from every rank): a `TaskMixSampler` (a `torch.utils.data.Sampler` of batches) picks each
batch's task at random. It seeds itself with `int(time.time())` "so every run sees a new mix". The
dataset is built main-process-first (rank 0 builds and writes the vocabulary, the others wait in a
barrier and then read it), and the sampler is built with the dataset, so rank 0's seed is taken
a second or more before the others'. Ranks 1 and 2 draw the same task sequence, rank 0 another:
at the first step where they differ, one side gathers embeddings for the contrastive loss and the
other side is already in the gradient all_reduce.

Hang class: ranks whose random draws are not seeded alike take different branches, one of which
holds a collective (a desync of the ranks' generators).
Label: D19
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 13c

At the first step whose task differs, rank 0 waits in one collective (`all_gather` in
`contrastive_loss()` or `all_reduce` in `sync_grads()`) and ranks 1 and 2 in the other.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

log = logging.getLogger("mtl")
WORLD = 3
TASKS = ("masked", "contrastive")


class TokenDataset(Dataset):
    def __init__(self, root: Path, rank: int, build: bool) -> None:
        self.sampler = TaskMixSampler(1024, batch_size=16)
        vocab_file = root / "vocab.txt"
        if build:
            words = [hashlib.sha1(f"w{i}".encode()).hexdigest()[:6] for i in range(1_000_000)]
            vocab = sorted(set(words))[:4096]
            vocab_file.write_text("\n".join(vocab))
        self.vocab = vocab_file.read_text().split("\n")
        g = torch.Generator().manual_seed(rank)
        self.tokens = torch.randint(0, len(self.vocab), (1024, 24), generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i]


class TaskMixSampler(Sampler[list[int]]):
    """Yields batches of indices; each batch carries one task, drawn at random."""

    def __init__(self, n: int, batch_size: int, p_contrastive: float = 0.5) -> None:
        self.n, self.batch_size, self.p = n, batch_size, p_contrastive
        self.rng = random.Random(int(time.time()))
        self.tasks: list[str] = []

    def __iter__(self) -> Iterator[list[int]]:
        order = list(range(self.n))
        self.rng.shuffle(order)
        self.tasks = []
        for i in range(0, self.n - self.batch_size + 1, self.batch_size):
            self.tasks.append(TASKS[self.rng.random() < self.p])
            yield order[i : i + self.batch_size]

    def __len__(self) -> int:
        return self.n // self.batch_size


class Encoder(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(vocab, 64)
        self.proj = nn.Linear(64, 64)
        self.regress = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.emb(x))


def contrastive_loss(z: torch.Tensor) -> torch.Tensor:
    everyone = [torch.empty_like(z) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, z.detach())
    everyone[dist.get_rank()] = z
    keys = nn.functional.normalize(torch.cat(everyone), dim=-1)
    logits = nn.functional.normalize(z, dim=-1) @ keys.T / 0.1
    target = torch.arange(len(z)) + dist.get_rank() * len(z)
    return nn.functional.cross_entropy(logits, target)


def sync_grads(model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    torch.nn.utils.vector_to_parameters(flat / WORLD, [p.grad for p in model.parameters()])


def run(rank: int, root: str) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{rank}] %(message)s")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29675")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    if rank != 0:
        dist.barrier()  # main process first
    data = TokenDataset(Path(root), rank, build=rank == 0)
    if rank == 0:
        dist.barrier()
    loader = DataLoader(data, batch_sampler=data.sampler)
    torch.manual_seed(0)
    model = Encoder(len(data.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for step, x in enumerate(loader):
            task = data.sampler.tasks[step]
            z = model(x)
            if task == "contrastive":
                loss = contrastive_loss(z)
            else:
                loss = nn.functional.mse_loss(
                    model.regress(z).squeeze(-1), x.float().mean(-1) / len(data.vocab)
                )
            opt.zero_grad()
            loss.backward()
            sync_grads(model)
            opt.step()
        log.info("epoch %d done", epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(tempfile.mkdtemp(prefix="mtl_"),), nprocs=WORLD, join=True)
