"""D9 / D22: a per-rank filter leaves rank 1 with 3 batches and rank 0 with 5.

The loop runs under DDP's Join with throw_on_early_termination=True, the switch that turns the
end-of-epoch hang into an error naming the rank that ran out of data.
"""

import datetime

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(4, 8) for _ in range(5 if rank == 0 else 3)]
    print(f"rank {rank}: {len(batches)} batches", flush=True)
    with Join([model], throw_on_early_termination=True):
        for step, x in enumerate(batches):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
