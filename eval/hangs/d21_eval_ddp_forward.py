"""Validation on rank 0 only, through the DDP-wrapped model, without torch.no_grad().

Hang class: a collective hidden in the DDP forward (its buffer broadcast: the model has
BatchNorm) run under `if rank == 0:`.
Label: D21
Odd ranks: 0
Launch: torchrun 2

`model.eval()` does not stop DDP from broadcasting buffers in forward while grad is enabled, so
rank 0 waits in the broadcast inside `model(x)`; rank 1 waits in the barrier after validation.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def validate(model: nn.Module) -> float:
    model.eval()
    total = 0.0
    for _ in range(10):
        out = model(torch.randn(16, 8))
        total += float(out.mean())
    model.train()
    return total / 10


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(20):
        for _ in range(5):
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} val {validate(model):.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
