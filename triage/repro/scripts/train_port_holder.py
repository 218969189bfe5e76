"""D4, the first job: a small training loop that holds its master port for a while."""

import datetime
import time

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    for step in range(60):
        grads = torch.ones(2)
        dist.all_reduce(grads)
        time.sleep(0.5)
        print(f"job A rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
