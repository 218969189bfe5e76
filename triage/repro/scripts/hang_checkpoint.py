"""MN3, hanging: rank 0 writes the checkpoint and the write stalls (a full or hung filesystem), while
rank 1 waits for it in the barrier after the save.

The stalled filesystem is a pipe that nobody reads: the state dict is larger than the pipe's
buffer, so the write blocks the way a write to a hung NFS mount does, and no file is left behind.
"""

import datetime
import os

import torch
import torch.distributed as dist


def save_checkpoint(model: torch.nn.Module, rank: int) -> None:
    """Rank 0 writes the checkpoint; every rank waits for it before going on."""
    if rank == 0:
        _, write_end = os.pipe()  # a filesystem that stopped taking writes
        with os.fdopen(write_end, "wb") as stalled:
            torch.save(model.state_dict(), stalled)  # the suspect stops here: the write never returns
    dist.barrier()  # the others wait here


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    model = torch.nn.Linear(1024, 512)
    for step in range(3):
        grads = torch.ones(4) * step
        dist.all_reduce(grads)
    save_checkpoint(model, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
