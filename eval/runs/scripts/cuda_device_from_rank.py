"""mistake: the model and batches are put on `cuda:{rank}` (device chosen by the global rank, no
check that CUDA exists), copied from a multi-GPU recipe and run on a CPU-only machine.
label: D3
alternates: E9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/cuda_device_from_rank.py
source: none known
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    device = torch.device(f"cuda:{rank}")
    model = nn.Linear(16, 4).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    x = torch.randn(8, 16, device=device)
    ddp(x).sum().backward()
    print(f"rank {rank} ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
