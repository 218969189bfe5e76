"""X2: the scheduler preempts the job (a spot instance reclaimed, `scancel`, a Kubernetes
eviction): the launcher receives SIGTERM mid-training and stops every worker. Here rank 0 plays
the scheduler and sends SIGTERM to torchrun, its parent, after step 2; the ranks are then waiting
in the next all-reduce, so nothing else fails before the launcher stops them."""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    grads = torch.ones(16)
    for step in range(50):
        dist.all_reduce(grads)
        print(f"rank {rank} step {step}", flush=True)
        if step == 2:
            if rank == 0:
                os.kill(os.getppid(), signal.SIGTERM)  # the preemption notice reaches the launcher
            time.sleep(20)  # both ranks busy in the step when the launcher stops them
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
