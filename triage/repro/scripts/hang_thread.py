"""D21 from a background thread: rank 0 saves in a thread whose barrier only rank 0 reaches.

The main thread of rank 0 waits in `join()` (idle, in no collective); the collective that hangs
is the saver thread's. Rank 1 trains on and waits in its next all_reduce.
"""

import datetime
import threading
import time

import torch
import torch.distributed as dist


def save_and_sync(step: int) -> None:
    """Write a checkpoint, then wait until every rank has seen it (the bug: only rank 0 runs this)."""
    time.sleep(0.01 * step)
    dist.barrier()  # the suspect stops here: the saver thread waits for ranks that never come


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(1000):
        dist.all_reduce(torch.ones(4) * step)  # the others wait here
        if rank == 0 and step == 2:
            saver = threading.Thread(target=save_and_sync, args=(step,), name="saver")
            saver.start()
            saver.join()
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
