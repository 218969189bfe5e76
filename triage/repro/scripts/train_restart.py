"""MN5: rank 1 is killed at step 4 on the first attempt; torchrun --max-restarts relaunches both
ranks, and since nothing loads a checkpoint, training starts again at step 0."""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start_step = 0  # no load-latest-checkpoint: every launch begins here
    for step in range(start_step, 6):
        if attempt == 0 and rank == 1 and step == 4:
            os._exit(137)  # the worker is killed, as a preemption or the OOM killer would
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
