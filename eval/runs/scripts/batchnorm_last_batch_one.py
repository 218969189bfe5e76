"""mistake: an ordinary model bug: 18 samples, DistributedSampler over 2 ranks (9 each) and batch
size 4, so the last batch on every rank holds a single sample and BatchNorm1d in training mode
cannot normalise it (drop_last left off); every rank raises.
label: none
alternates: D10
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/batchnorm_last_batch_one.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = TensorDataset(torch.randn(18, 6), torch.randn(18, 1))
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds))
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} batch {i} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
