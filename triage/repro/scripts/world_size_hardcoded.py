"""D1: a script passes its own rank and world size to init_process_group instead of reading the
launcher's, and is launched with torchrun --nproc-per-node=2. What it hard-codes comes from
TRIAGE_REPRO_HOW:

- `world`: `world_size=4`, "the number of GPUs on the box", written once: the two ranks that exist
  wait in init_process_group for ranks 2 and 3, which nobody started, until the timeout;
- `rank`: `rank=0`, copied from a single-process notebook: both processes claim rank 0 and wait
  for a rank 1 that never announces itself.
"""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    if os.environ.get("TRIAGE_REPRO_HOW", "world") == "rank":
        rank, world_size = 0, int(os.environ["WORLD_SIZE"])
    else:
        rank, world_size = int(os.environ["RANK"]), 4
    print(f"rank {rank}: joining a job of {world_size} processes", flush=True)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=5))
    grads = torch.ones(4)
    dist.all_reduce(grads)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
