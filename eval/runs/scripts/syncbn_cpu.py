"""mistake: following advice for small per-GPU batches, the model is converted with
nn.SyncBatchNorm.convert_sync_batchnorm before DDP, but the job runs on CPU with gloo; SyncBatchNorm
only runs on GPU tensors, so every rank raises in the first forward.
label: none
alternates: D10
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/syncbn_cpu.py
source: https://github.com/QData/spacetimeformer/issues/90
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        out = model(torch.randn(4, 3, 16, 16))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
