"""Rank 0 downloads the dataset, the others wait in `dist.barrier()`; the download raises on
rank 0, a broad `except Exception` logs it and returns from `main()`. A heartbeat thread started
for the progress dashboard (stopped at the end of `main()`) keeps rank 0's process alive.

Hang class: one rank failed (its error swallowed) and left; its process does not exit, the others
wait for it.
Label: D20
Odd ranks: 0
Launch: python 2
Held out: session 11e

Rank 0's `download()` raises `ConnectionError`; rank 0's main thread returns and the interpreter
waits at exit for the heartbeat thread; rank 1 waits in `dist.barrier()`.
"""

import os
import threading

import torch
import torch.distributed as dist

STOP = threading.Event()


def heartbeat() -> None:
    while not STOP.wait(1.0):
        pass


def download(root: str) -> None:
    raise ConnectionError(f"could not reach the mirror for {root}")


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    threading.Thread(target=heartbeat, name="dashboard-heartbeat").start()
    if rank == 0:
        try:
            download("/tmp/data")
        except Exception as err:
            print(f"download failed: {err}", flush=True)
            return
    dist.barrier()
    x = torch.ones(4)
    dist.all_reduce(x)
    STOP.set()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
