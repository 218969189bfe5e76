"""mistake: a CUDA training script is tried on a CPU-only workstation with gloo: the model and DDP
lines were switched to CPU, but the batch helper `to_device()` still ends in `.cuda(non_blocking=True)`
(one `.cuda()` left over), so every rank fails in the first step on the CPU wheel. Output collected
with `--tee 3`.
label: none
alternates: E9
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 2 eval/runs/scripts/cuda_helper_left_cpu.py
source: https://discuss.pytorch.org/t/assertionerror-torch-not-compiled-with-cuda-enabled/
written: session 11c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def to_device(batch):
    x, y = batch
    return x.cuda(non_blocking=True), y.cuda(non_blocking=True)


def main():
    dist.init_process_group(backend="gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    model = DDP(model)
    ds = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
    loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for batch in loader:
            x, y = to_device(batch)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if local_rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
