"""D20, hanging: rank 1 finds no data shard of its own and returns before it joins the process group.
It exits with status 0, so the launcher keeps waiting for the other rank, and rank 0 waits for
rank 1 in init_process_group until the timeout: a rank that is gone, with nothing in any log.
"""

import datetime
import os

import torch.distributed as dist

SHARDS = ["part-00000"]  # one shard for a job of two ranks


def main() -> None:
    """Run this reproduction as one rank of the job."""
    rank = int(os.environ["RANK"])
    if rank >= len(SHARDS):
        return  # the suspect leaves here, quietly
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))  # the others wait here
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
