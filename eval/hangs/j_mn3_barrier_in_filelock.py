"""Rank 0 downloads the dataset under an exclusive file lock and waits in a barrier before letting go of it.

Hang class: a lock held across a collective: rank 0 waits in the barrier holding the lock, the
other ranks wait for the lock before they reach the barrier.
Label: MN3
Odd ranks: 1 2
Launch: torchrun 3
Held out: session 9

The download starts before `init_process_group` so that it overlaps the rendezvous; the writer
keeps the cache's lock until "everybody is in sync". The readers take the lock shared to load the
cache, then go to the barrier: ranks 1 and 2 wait in `flock`, rank 0 in `barrier()`.
"""

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

import torch
import torch.distributed as dist


@contextlib.contextmanager
def cache_lock(path: str, exclusive: bool) -> Iterator[None]:
    with open(path + ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def download(path: str) -> None:
    torch.save({"tokens": torch.randint(0, 1000, (4096,))}, path)


def main() -> None:
    rank = int(os.environ["RANK"])
    cache = os.path.join(tempfile.gettempdir(), f"corpus_{os.getppid()}.pt")
    if rank == 0:
        with cache_lock(cache, exclusive=True):
            download(cache)
            dist.init_process_group("gloo")
            dist.barrier()  # the others may read the cache now
    else:
        dist.init_process_group("gloo")
        with cache_lock(cache, exclusive=False):
            corpus = torch.load(cache)
        print(rank, corpus["tokens"].shape, flush=True)
        dist.barrier()
    x = torch.ones(4)
    dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
