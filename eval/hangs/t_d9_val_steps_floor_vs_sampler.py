"""Validation averaged step by step across ranks; the step count comes from two places: rank 0
(which also logs the full-set figures) loops `len(val_dataset) // world_size` batches of its
plain loader, the other ranks loop over a `DistributedSampler` loader.

Hang class: ranks run different numbers of validation steps, each step holds a collective.
Label: D9
Odd ranks: 0
Launch: torchrun 3
Held out: session 11e

100 samples, 3 ranks, batch 1: rank 0 stops after 33 steps and goes on to the final
`dist.barrier()`; the sampler pads to 34 per rank, so ranks 1 and 2 wait in the 34th
`all_reduce`.
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    val_dataset = TensorDataset(torch.randn(100, 8), torch.randn(100, 1))
    model = torch.nn.Linear(8, 1)
    if rank == 0:
        loader = DataLoader(val_dataset, batch_size=1)
        steps = len(val_dataset) // world
    else:
        loader = DataLoader(val_dataset, batch_size=1, sampler=DistributedSampler(val_dataset))
        steps = len(loader)
    total = torch.zeros(1)
    with torch.no_grad():
        for step, (x, y) in enumerate(loader):
            if step >= steps:
                break
            loss = torch.nn.functional.mse_loss(model(x), y).reshape(1)
            dist.all_reduce(loss)
            total += loss / world
    if rank == 0:
        print(f"val loss {total.item() / steps:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
