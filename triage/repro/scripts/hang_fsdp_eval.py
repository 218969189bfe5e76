"""D21 under FSDP2: rank 0 evaluates the sharded model alone (`if rank == 0:`), and every forward
of a sharded model all-gathers its parameters from every rank: rank 0 waits in that all-gather,
rank 1 goes on and waits in the next step's all_reduce.
"""

import datetime
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fully_shard(model)
    for step in range(1000):
        model(torch.ones(4, 8)).sum().backward()
        if rank == 0 and step == 2:
            with torch.no_grad():
                model(torch.zeros(4, 8))  # the suspect stops here: the others never run this forward
        dist.all_reduce(torch.ones(4) * step)  # the others wait here
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
