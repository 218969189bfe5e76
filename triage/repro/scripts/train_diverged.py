"""D20: rank 1 hits a NaN loss at step 3 and raises; rank 0 is left waiting in the next all-reduce."""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(8):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        if rank == 1 and step == 3:
            raise FloatingPointError(f"loss is nan at step {step}")  # one shard hit a bad sample
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
