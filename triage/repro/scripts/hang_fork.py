"""D21 with ranks forked by multiprocessing.Process (Linux's default start method): no rank has
RANK in its environment, and each keeps its parent's command line. Rank 0 waits in a barrier
inside `if rank == 0:` while rank 1 trains on.
"""

import datetime
import multiprocessing
import os
import time

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    """One rank of the job."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=600))
    if rank == 0:
        dist.barrier()  # the suspect stops here: only rank 0 gets to this barrier
    for step in range(1000):
        dist.all_reduce(torch.ones(4) * step)  # the others wait here
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    ranks = [multiprocessing.Process(target=run, args=(rank, 2)) for rank in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
