"""mistake: each rank picks its own batch size from the memory it has free (an "auto batch size"
helper, 8 on rank 0, 6 on rank 1), so with the same DistributedSampler shard the ranks run a
different number of steps per epoch; rank 1 does the extra steps' all-reduces alone (init
timeout 10 s).
label: D9
alternates: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/per_rank_batch_size.py
source: none known
written: session 9, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def auto_batch_size(rank):
    free_gb = 11.5 if rank == 0 else 8.7  # what the probe reported on this rank's card
    return 8 if free_gb > 10 else 6


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    data = TensorDataset(torch.randn(96, 10), torch.randn(96, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=auto_batch_size(rank), sampler=sampler)
    model = nn.parallel.DistributedDataParallel(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"rank {rank} epoch {epoch} done after {step + 1} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
