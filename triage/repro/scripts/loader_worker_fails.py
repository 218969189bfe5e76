"""One of rank 1's DataLoader workers fails while rank 0 waits for rank 1 in the all-reduce. How
comes from TRIAGE_REPRO_HOW:

- `raise`: a corrupt sample raises in the worker (as PIL does on a truncated JPEG); rank 1 stops
  with the worker's traceback at its third batch (D20);
- `kill`: the worker is killed with SIGKILL (as the OOM killer does when the workers' copies of
  the dataset fill host memory) in rank 1's first batch, before any of its batches is in flight;
  rank 1's loader reports the killed worker (X4)."""

import datetime
import os
import signal

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Images(Dataset[torch.Tensor]):
    """A dataset with one bad sample in rank 1's shard."""

    def __init__(self, rank: int, how: str) -> None:
        self.rank = rank
        self.how = how

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and self.how == "kill" and index == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker, not the rank, is killed
        if self.rank == 1 and self.how == "raise" and index == 20:
            raise OSError(f"image file is truncated (sample {index})")
        return torch.full((16,), float(index))


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    loader = DataLoader(
        Images(rank, os.environ.get("TRIAGE_REPRO_HOW", "raise")), batch_size=8, num_workers=1
    )
    for step, batch in enumerate(loader):
        grads = batch.sum(0)
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
