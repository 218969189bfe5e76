"""Rank 0 prepares the vocabulary and tells the others through a TCPStore key, after a barrier.

Hang class: two ways of waiting mixed: the others wait on a store key that rank 0 sets only
after a barrier they never reach.
Label: D21
Odd ranks: 0
Launch: python 3
Held out: session 9c

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The script
keeps a side TCPStore for small metadata. Rank 0 builds the vocabulary, then "makes sure everyone
is ready" with `dist.barrier()` before publishing it; ranks 1 and 2 wait in `store.get` for the
vocabulary and would call the barrier only after it.
"""

import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def build_vocab(corpus: list[str]) -> dict[str, int]:
    words = sorted({w for line in corpus for w in line.split()})
    return {w: i for i, w in enumerate(words)}


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    meta = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, world,
        is_master=rank == 0, timeout=timedelta(hours=2),
    )  # fmt: skip
    corpus = ["the cat sat", "on the mat", "the dog ran"] * 100
    if rank == 0:
        vocab = build_vocab(corpus)
        dist.barrier()
        meta.set("vocab", json.dumps(vocab))
    else:
        vocab = json.loads(meta.get("vocab"))
        dist.barrier()
    model = nn.EmbeddingBag(len(vocab), 8)
    for line in corpus[rank::world]:
        ids = torch.tensor([vocab[w] for w in line.split()])
        loss = model(ids.unsqueeze(0)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
