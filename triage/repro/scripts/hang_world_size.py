"""D1, hanging: a job started by hand, one `python` per rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT exported, says WORLD_SIZE=3 but only two processes were started (the third command was
never run). Ranks 0 and 1 wait in init_process_group for rank 2 until the timeout.
"""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))  # the others wait here
    grads = torch.ones(4)
    dist.all_reduce(grads)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
