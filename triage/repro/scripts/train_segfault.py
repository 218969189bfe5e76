"""P6: rank 1 segfaults in native code mid-training (an extension reading a null pointer) and dies
with no Python traceback; rank 0 waits in the next all-reduce until torchrun stops it."""

import ctypes
import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    grads = torch.ones(16)
    for step in range(6):
        if rank == 1 and step == 2:
            ctypes.string_at(0)  # what a buggy C/CUDA extension does: read address 0
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
