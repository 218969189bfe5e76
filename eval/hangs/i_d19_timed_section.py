"""A `timed_section` context manager that syncs on exit and logs exceptions instead of raising them.

Hang class: an exception on one rank is swallowed by a context manager whose exit calls barrier,
so that rank skips the step's all_reduce and waits in the barrier.
Label: D19
Odd ranks: 2
Launch: python 4
Held out: written in session 8 before the engine was changed, measured once

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). At step 4
rank 2's batch has a wrong shape; the matmul raises inside `with timed_section("step")`, whose
`__exit__` logs it, calls `dist.barrier()` to line the ranks up for timing, and suppresses the
error. Rank 2 waits in that barrier; ranks 0, 1 and 3 wait in the all_reduce of the gradients.
"""

import logging
import os
import time
from types import TracebackType

import torch
import torch.distributed as dist

log = logging.getLogger("train")


class timed_section:  # noqa: N801 - used like a function
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "timed_section":
        self.start = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if err is not None:
            log.error("%s failed: %s", self.name, err)
        dist.barrier()
        log.info("%s took %.3fs", self.name, time.perf_counter() - self.start)
        return True


def main() -> None:
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank = dist.get_rank()
    w = torch.randn(6, 2, requires_grad=True)
    for step in range(1000):
        width = 5 if (rank == 2 and step == 4) else 6
        x = torch.randn(4, width)
        with timed_section("step"):
            loss = (x @ w).pow(2).mean()
            loss.backward()
            dist.all_reduce(w.grad)
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad = None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
