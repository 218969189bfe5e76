"""MN3, hanging: rank 1 is stuck loading a sample (a stalled read) while rank 0 waits in all_reduce."""

import datetime
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class SlowOnRankOne(Dataset[torch.Tensor]):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and index == 8:
            time.sleep(3600)  # the suspect stops here: a read from a stalled network filesystem
        return torch.ones(4)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    loader = DataLoader(SlowOnRankOne(rank), batch_size=4, num_workers=0)
    for batch in loader:
        total = batch.sum()
        dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
