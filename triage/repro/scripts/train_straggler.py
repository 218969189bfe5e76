"""MN3: rank 1 stalls past the collective timeout (a slow upload); rank 0 times out waiting."""

import datetime
import time

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        if rank == 1 and step == 2:
            print(f"rank {rank}: uploading checkpoint to slow storage...", flush=True)
            time.sleep(12)  # longer than the 5 s timeout the group was created with
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
