"""mistake: the OneCycleLR schedule's length is computed as `epochs * len(train_loader) // world_size`
("each rank sees 1/N of the data"), but the loader is built on the DistributedSampler and its length is
already per rank, so the schedule is N times too short and every rank's scheduler raises at the same step.
label: none
alternates: D11
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/onecycle_total_steps_divided.py
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    epochs = 2
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=1e-2, total_steps=epochs * len(loader) // world
    )
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.5f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
