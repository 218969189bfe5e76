"""P8: a `breakpoint()` left in the training loop on rank 0, run under torchrun. The workers have
no terminal: pdb reads end-of-file from stdin and quits (bdb.BdbQuit) while rank 1 waits in the
all-reduce for it."""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    grads = torch.ones(16)
    for step in range(4):
        if rank == 0 and step == 2:
            breakpoint()  # "just to look at the gradients"
        dist.all_reduce(grads)
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
