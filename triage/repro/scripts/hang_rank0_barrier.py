"""D21, hanging: rank 0 waits in a barrier inside `if rank == 0:` while rank 1 trains on.

The collective timeout is long on purpose: the job stays frozen, as a real one does for 30 minutes,
so `triage hang` can look at it while it hangs.
"""

import datetime
import time

import torch
import torch.distributed as dist


def train_step(step: int) -> None:
    """One training step: an all-reduce of fake gradients."""
    grads = torch.ones(4) * step
    dist.all_reduce(grads)
    time.sleep(0.05)


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    if rank == 0:
        dist.barrier()  # the suspect stops here: only rank 0 gets to this barrier
    for step in range(1000):
        train_step(step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
