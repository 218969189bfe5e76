"""MN3 in a native wait: rank 1 blocks on a lock file (flock: a C call with no Python frame of its
own) that rank 0 took to build a shared cache and never released before the next collective,
where rank 0 now waits for rank 1.
"""

import datetime
import fcntl
import os
import tempfile

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    path = os.path.join(tempfile.gettempdir(), f"hang_lock_{os.environ.get('MASTER_PORT', '0')}.lock")
    with open(path, "w") as lock:
        if rank == 0:
            fcntl.flock(lock, fcntl.LOCK_EX)  # rank 0 builds the cache first
        dist.barrier()
        fcntl.flock(lock, fcntl.LOCK_EX)  # the suspect stops here: rank 0 still holds the lock
        dist.all_reduce(torch.ones(4))  # the others wait here
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
