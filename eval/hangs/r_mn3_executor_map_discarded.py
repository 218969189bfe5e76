"""Rank 0 pre-tokenises the validation shards with a thread pool before the others may read them:
`pool.map(tokenize_shard, shards)` puts each result on a queue, and the main thread collects one
item per shard from the queue.

Hang class: a helper thread died on an exception nobody sees (the iterator `Executor.map` returns
is never consumed, so its error is never raised), and the rank waits for ever for its result while
the other ranks wait at the barrier.
Label: MN3
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 11c

Shard 3 holds a record with no `text` key: that worker raises `KeyError` inside the pool; rank 0's
main thread waits in `results.get()` for the fourth shard; rank 1 waits in `dist.barrier()`.
"""

import os
import queue
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def make_shards() -> list[list[dict[str, str]]]:
    shards = [[{"text": f"doc {s}-{i} " * (i + 1)} for i in range(20)] for s in range(6)]
    shards[3][7] = {"body": "a record from the old export"}
    return shards


def tokenize_shard(
    index: int, shard: list[dict[str, str]], out: "queue.Queue[tuple[int, torch.Tensor]]"
) -> None:
    ids = [len(rec["text"].split()) for rec in shard]
    out.put((index, torch.tensor(ids)))


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "12355"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if rank == 0:
        shards = make_shards()
        results: queue.Queue[tuple[int, torch.Tensor]] = queue.Queue()
        pool = ThreadPoolExecutor(max_workers=3)
        pool.map(tokenize_shard, range(len(shards)), shards, [results] * len(shards))
        tokenized = dict(results.get() for _ in shards)
        torch.save(tokenized, os.path.join(os.environ.get("TMPDIR", "/tmp"), "h11c_val_tok.pt"))
    dist.barrier()
    lengths = torch.tensor([float(rank)])
    dist.all_reduce(lengths)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
