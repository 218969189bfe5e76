"""P4: rank 1 finds a bad shard and calls sys.exit(3) without printing why; rank 0 is left in the
next all-reduce. The launcher reports the exit status, and no traceback of rank 1 exists."""

import datetime
import sys

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    grads = torch.ones(16)
    for step in range(6):
        if rank == 1 and step == 2:
            sys.exit(3)  # a validation helper's early exit, its message sent to a logger nobody reads
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
