"""MN3, hanging with an async collective: rank 1 is stuck reading a sample while rank 0 waits for
the all_reduce it issued with async_op=True, in `work.wait()`.

This is how a hung NCCL job looks from Python: NCCL collectives return at once and the rank waits
later, at `work.wait()`, `loss.item()` or another sync point, in C++ code with no Python frame of
torch.distributed on the stack, until the watchdog's timeout fires.
"""

import datetime
import time

import torch
import torch.distributed as dist


def load_batch(rank: int, step: int) -> torch.Tensor:
    """A batch from storage: on rank 1 the read at step 3 never returns."""
    if rank == 1 and step == 3:
        time.sleep(3600)  # the suspect stops here: a read from a stalled network filesystem
    return torch.ones(4) * step


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    work = None
    for step in range(100):
        grads = load_batch(rank, step)
        if work is not None:
            work.wait()  # the others wait here: the previous step's all_reduce, overlapped with loading
        work = dist.all_reduce(grads, async_op=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
