"""mistake: each rank builds its dataset from the files its local cache directory holds (rank 1's
cache misses two files), then wraps it in a DistributedSampler; the ranks compute different
numbers of steps per epoch and the DDP run hangs on the last steps (init timeout 10 s).
label: D22
alternates: D9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/dataset_len_per_rank.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def cached_files(rank):
    files = [f"shard_{i:03d}.pt" for i in range(16)]
    return files[:-2] if rank == 1 else files


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    n = len(cached_files(rank)) * 4
    ds = TensorDataset(torch.randn(n, 5), torch.randn(n, 1))
    sampler = DistributedSampler(ds, shuffle=True)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
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
