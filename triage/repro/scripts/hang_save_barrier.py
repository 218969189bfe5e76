"""D21, hanging: the checkpoint helper ends with a barrier, but only rank 0 calls the helper.

The barrier sits in `save_checkpoint`, which has no rank test of its own: the test is at the call
site, `if rank == 0 and ...: save_checkpoint(...)`, so rank 0 waits in the barrier while rank 1
trains on and waits in the next step's all_reduce.
"""

import datetime
import io

import torch
import torch.distributed as dist


def save_checkpoint(model: torch.nn.Module, target: io.BytesIO) -> None:
    """Write the checkpoint, then make every rank wait until it is written."""
    torch.save(model.state_dict(), target)
    dist.barrier()  # the suspect stops here: only rank 0 ever calls save_checkpoint


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 8)
    for step in range(1000):
        grads = torch.ones(4) * step
        dist.all_reduce(grads)  # the others wait here
        if rank == 0 and step == 2:
            save_checkpoint(model, io.BytesIO())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
