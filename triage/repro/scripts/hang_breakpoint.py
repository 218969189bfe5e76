"""P8, hanging: a `pdb.set_trace()` left in after a debugging session stops rank 0 at the pdb prompt.

Under a launcher nobody answers that prompt (the terminal is the launcher's, or there is none), so
rank 0 waits there for ever while rank 1 waits for it in all_reduce. The job's stdin is a pipe
nobody writes to, as a terminal nobody types in.
"""

import datetime
import pdb

import torch
import torch.distributed as dist


def debug_here() -> None:
    """A breakpoint helper left in from a debugging session."""
    pdb.set_trace()  # the suspect stops here (Python 3.13+ at the call, earlier on the return)


def train_step(rank: int, step: int) -> None:
    """One training step; rank 0 still stops at the breakpoint from debugging its step 2."""
    grads = torch.ones(4) * step
    if rank == 0 and step == 2:
        debug_here()
    dist.all_reduce(grads)


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(1000):
        train_step(rank, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
