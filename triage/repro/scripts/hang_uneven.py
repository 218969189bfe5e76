"""D9, hanging: DDP where rank 0 has fewer batches than rank 1.

Rank 0 leaves its loop and waits in the barrier after it; rank 1 is still inside backward(), where
DDP all-reduces the gradients, waiting for rank 0's share that never comes.
"""

import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randn(4, 8) for _ in range(3 + 2 * rank)]  # a per-rank split of unequal length
    for batch in batches:
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()  # the suspect stops here: rank 0 ran out of batches and waits
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
