"""D21 hidden in DDP's forward: rank 0 validates alone through the DDP-wrapped model, without
torch.no_grad(), and DDP broadcasts the model's buffers (BatchNorm's running statistics) from
rank 0 in every forward while grad is enabled: rank 0 waits in that broadcast, a collective with
no torch.distributed call on its stack, while rank 1 waits in the barrier after validation.
"""

import datetime

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def validate(model: nn.Module) -> float:
    """The validation loss, on this rank's model (eval mode, but grad still enabled)."""
    model.eval()
    out = model(torch.randn(16, 8))  # the suspect stops here: the forward broadcasts the buffers
    model.train()
    return float(out.mean())


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"val {validate(model):.3f}", flush=True)
    dist.barrier()  # the others wait here
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
