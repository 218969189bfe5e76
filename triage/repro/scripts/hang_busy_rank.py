"""MN3, hanging: rank 1 computes an evaluation metric in pure Python, quadratic in the size of the
evaluation set (hours), while rank 0 waits for it in the all_reduce of the next step. The
straggler keeps a core busy: py-spy sees it running, at the same line every time.
"""

import datetime
import os

import torch
import torch.distributed as dist


def pairwise_agreement(size: int) -> int:
    """A metric over every pair of samples: fine on 1,000 samples, hours on 1,000,000."""
    return sum(1 for a in range(size) for b in range(size) if (a ^ b) % 7 == 3)  # the suspect stops here


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(1000):
        grads = torch.ones(4) * step
        dist.all_reduce(grads)  # the others wait here
        if rank == 1 and step == 2:
            os.nice(10)  # only so that the machine running this reproduction stays responsive
            grads += pairwise_agreement(1_000_000)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
