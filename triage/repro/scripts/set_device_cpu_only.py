"""E9: a script written for GPUs pins each rank to its GPU with torch.cuda.set_device(LOCAL_RANK)
on a machine whose torch has no CUDA (the CPU-only wheel), although it asks for gloo."""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = torch.nn.Linear(8, 1).cuda()
    print(f"rank {dist.get_rank()} model on {next(model.parameters()).device}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
