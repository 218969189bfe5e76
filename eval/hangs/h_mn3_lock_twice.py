"""A logging helper takes a non-reentrant lock that its caller already holds, on one rank.

Hang class: a rank deadlocked on its own lock, outside any collective, while the other waits in a
collective.
Label: MN3
Odd ranks: 1
Launch: python 2
Held out: written after the first fixes, measured once

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 1 hits
the warning path, which logs while holding the lock: it waits in `lock.acquire()` for ever; rank 0
waits in all_reduce.
"""

import os
import threading

import torch
import torch.distributed as dist

_lock = threading.Lock()
_log: list[str] = []


def log(message: str) -> None:
    with _lock:
        _log.append(message)


def record_step(step: int, value: float) -> None:
    with _lock:
        if value > 1.5:
            log(f"step {step}: value {value} is high")
        _log.append(f"{step} {value}")


def main() -> None:
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank = dist.get_rank()
    for step in range(1000):
        t = torch.ones(2) * (1 + rank * (step == 3))
        record_step(step, float(t[0]))
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
