"""MN3, hanging: rank 1 is stuck loading a sample (a stalled read) while rank 0 waits in all_reduce.

HANG_LOADER_WORKERS=N loads in N DataLoader worker processes (children of the rank that inherit its
RANK and LOCAL_RANK): the stalled read is then in a worker, and rank 1 waits for it.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class SlowOnRankOne(Dataset[torch.Tensor]):
    """A dataset whose loading stalls on rank 1."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and index == 8:
            time.sleep(3600)  # the suspect stops here: a read from a stalled network filesystem
        return torch.ones(4)


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    workers = int(os.environ.get("HANG_LOADER_WORKERS", "0"))
    loader = DataLoader(SlowOnRankOne(rank), batch_size=4, num_workers=workers)
    for batch in loader:
        total = batch.sum()
        dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
