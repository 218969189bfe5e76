"""E15: FSDP1 wraps a model whose first layer is frozen (as with a frozen backbone or LoRA) as one
unit, with the default use_orig_params=False."""

import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model[0].requires_grad_(False)  # the frozen backbone
    sharded = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    loss = sharded(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    print(f"rank {dist.get_rank()} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
