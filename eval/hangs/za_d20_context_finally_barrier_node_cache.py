"""A text classifier whose entry point runs inside a `distributed()` context manager from the team's
utils: it initialises the group, yields, and in its `finally` waits in `dist.barrier()` "so no
rank tears the group down while another still uses it" before destroying the group. The token
cache is node-local (`$TMPDIR/node{N}/tokens.json`); on the second node a previous run was killed
while writing it, so at the start of epoch 2 (when the trainer reloads the cache) the two ranks
of that node raise `JSONDecodeError`. Their exception passes through the context manager's
`finally`, which waits in the barrier; the first node's ranks wait in the gradient all_reduce.

Hang class: some ranks raised (traceback not printed yet: it is printed after the `finally`), the
others wait for them in the next collective.
Label: D20
Odd ranks: 2 3
Launch: torchrun 4
Held out: session 13c

Ranks 2 and 3 wait in `dist.barrier()` in `distributed()`'s `finally` (entered from the `with` in
`main()` as the exception leaves it); ranks 0 and 1 wait in `dist.all_reduce` in `sync_grads()`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("textcls")
RANKS_PER_NODE = 2


@contextlib.contextmanager
def distributed() -> Iterator[tuple[int, int]]:
    dist.init_process_group("gloo")
    try:
        yield dist.get_rank(), dist.get_world_size()
    finally:
        dist.barrier()
        dist.destroy_process_group()


def node_cache(rank: int) -> Path:
    node = rank // RANKS_PER_NODE
    root = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / f"textcls_{os.getppid()}" / f"node{node}"
    root.mkdir(parents=True, exist_ok=True)
    path = root / "tokens.json"
    if rank % RANKS_PER_NODE == 0:
        vocab = {f"w{i}": i for i in range(200)}
        text = json.dumps({"vocab": vocab, "docs": [[i % 200 for i in range(j, j + 16)] for j in range(64)]})
        if node == 1:
            text = text[: len(text) // 2]  # what the killed run left behind
        path.write_text(text)
    return path


class Corpus:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.docs: list[list[int]] = []

    def reload(self) -> None:
        self.docs = json.loads(self.path.read_text())["docs"]

    def batches(self, rank: int, size: int = 8) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(rank)
        for i in range(0, len(self.docs), size):
            x = torch.tensor(self.docs[i : i + size])
            yield x, torch.randint(0, 4, (len(x),), generator=g)


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(200, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x))


def sync_grads(model: nn.Module, world: int) -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world


def train(rank: int, world: int) -> None:
    path = node_cache(rank)
    torch.manual_seed(0)
    model = BagClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    corpus = Corpus(path)
    corpus.docs = [[i % 200 for i in range(j, j + 16)] for j in range(64)]  # epoch 1 from memory
    for epoch in range(1, 6):
        if epoch > 1:
            corpus.reload()  # picks up the documents the cache job appended
        for x, y in corpus.batches(rank):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            sync_grads(model, world)
            opt.step()
        log.info("epoch %d loss %.3f", epoch, loss.item())


def main() -> None:
    with distributed() as (rank, world):
        logging.basicConfig(level=logging.INFO, format=f"[rank{rank}] %(message)s")
        train(rank, world)


if __name__ == "__main__":
    main()
