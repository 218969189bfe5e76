"""X1: every rank builds the full model in host memory before sharding it; the model is larger
than the machine's RAM, so the CPU allocator refuses the first large layer on every rank."""

import datetime

import torch
import torch.distributed as dist

HIDDEN = 1 << 21  # a 2M x 2M projection: 16 TiB of float32, far beyond any host's memory


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    print(f"rank {dist.get_rank()}: building the model", flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(HIDDEN, HIDDEN))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    print(f"rank {dist.get_rank()}: {sum(p.numel() for p in ddp.parameters())} parameters", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
