"""D23: every rank torch.save-s its own state to the same path, and rank 0 reads the file back
while another rank is still writing it.

Rank 1 writes through a slow stream, as on a network filesystem, so its write is still going
when rank 0 has saved its own state, evaluated for a moment and loads: the file rank 0 reads is
a torn mix of two checkpoints.
"""

import datetime
import os
import time
from typing import BinaryIO

import torch
import torch.distributed as dist


class SlowFile:
    """A file written in small pieces with pauses, like a checkpoint going to shared storage."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), 1 << 20):
            self.handle.write(view[start : start + (1 << 20)])
            self.handle.flush()
            time.sleep(0.02)
        return len(data)

    def flush(self) -> None:
        self.handle.flush()


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    path = os.environ["TRIAGE_REPRO_CHECKPOINT"]
    state = {"epoch": 3, "weights": torch.randn(1_000_000 * (rank + 1))}
    dist.barrier()
    if rank == 0:
        time.sleep(0.3)  # rank 0 finishes its step a little later
        torch.save(state, path)  # no `if rank == 0` around the save: every rank writes the file
        print("rank 0: saved checkpoint", flush=True)
        time.sleep(0.5)  # a quick evaluation, then reload the "best" checkpoint
        restored = torch.load(path)
        print(f"rank 0: checkpoint of epoch {restored['epoch']} loaded", flush=True)
    else:
        with open(path, "wb") as handle:
            torch.save(state, SlowFile(handle))  # type: ignore[arg-type]
        print(f"rank {rank}: saved checkpoint", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
