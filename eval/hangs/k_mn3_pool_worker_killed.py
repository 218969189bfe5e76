"""Rank 0 builds the tokenised cache with a multiprocessing Pool; one pool worker is killed.

Hang class: rank 0 alone preprocessing before a barrier, blocked on work that will never finish.
Label: MN3
Odd ranks: 0
Launch: torchrun 3
Held out: session 9b

The usual "main process first" pattern: rank 0 tokenises the corpus with `Pool.map` and writes
the cache, the others wait in a barrier and then read it. One pool worker dies abruptly on a
huge document (the kernel's OOM killer in the real job; here the worker kills itself with
SIGKILL), and `Pool.map` waits for its result forever. Ranks 1 and 2 wait in the barrier.
"""

import multiprocessing as mp
import os
import signal

import torch
import torch.distributed as dist
from torch import nn


def tokenise(doc: str) -> list[int]:
    if len(doc) > 10_000:  # the document that blew the worker's memory in the real run
        os.kill(os.getpid(), signal.SIGKILL)
    return [hash(w) % 30_000 for w in doc.split()]


def build_cache(path: str) -> None:
    docs = ["a short document about cats"] * 200 + ["word " * 5_000] + ["another document"] * 200
    with mp.get_context("fork").Pool(2) as pool:
        ids = pool.map(tokenise, docs, chunksize=16)
    torch.save(ids, path)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cache = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tokens.pt")
    if rank == 0:
        build_cache(cache)
    dist.barrier()
    data = torch.load(cache)
    model = nn.EmbeddingBag(30_000, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for ids in data[rank :: dist.get_world_size()]:
        loss = model(torch.tensor([ids])).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
