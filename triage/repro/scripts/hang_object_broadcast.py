"""D21 with an object collective: only rank 0 calls broadcast_object_list (to share the run's
config), as if only the source had to; rank 1 goes on and waits in its first all_reduce.
"""

import datetime
import time

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    config = [{"lr": 3e-4, "seed": 1234}] if rank == 0 else [None]
    if rank == 0:
        dist.broadcast_object_list(config, src=0)  # the suspect stops here: the receivers never call it
    for step in range(1000):
        dist.all_reduce(torch.ones(4) * step)  # the others wait here
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
