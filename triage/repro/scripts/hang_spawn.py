"""D21 under torch.multiprocessing.spawn: rank 0 waits in a barrier inside `if rank == 0:` while
rank 1 trains on. mp.spawn passes each rank its number as an argument: no rank process has RANK
in its environment (MASTER_ADDR and MASTER_PORT are set inside each rank, as the tutorials do).
"""

import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, world_size: int, port: str) -> None:
    """One rank of the job."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=600))
    if rank == 0:
        dist.barrier()  # the suspect stops here: only rank 0 gets to this barrier
    for step in range(1000):
        dist.all_reduce(torch.ones(4) * step)
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    port = os.environ.get("HANG_MASTER_PORT", "29500")
    mp.spawn(run, args=(2, port), nprocs=2)  # type: ignore[attr-defined,no-untyped-call]
