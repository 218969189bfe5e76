# triage eval (lint clean set): https://github.com/pytorch/pytorch/issues/24397
# Pasted in the issue (SyncBatchNorm raises with two forward passes before one backward); the report's
#   own evidence: "everything works when NUM_GPUS > 1", so the launch, device binding and DDP wrap are
#   right and the fault is SyncBatchNorm's with a world of one (the issue is open, triaged as a
#   SyncBatchNorm bug). Unmodified below this header up to `main()`'s second line, where the stored copy
#   of the thread breaks off mid-line.
import os
import torch
import torch.nn as nn

import torch.distributed as dist
import torch.multiprocessing as mp


NUM_GPUS = 1  # everything works when NUM_GPUS > 1
IS_TRAIN = True


class Model(nn.Module):

    def __init__(self):
        super(Model, self).__init__()

        self.conv = nn.Conv2d(32, 32, 1, bias=False)
        self.norm = nn.SyncBatchNorm(32)
        self.relu = nn.ReLU(inplace=False)

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        x = self.relu(x)
        return x


def worker(rank):

    torch.cuda.set_device(rank)
    device = torch.device(rank)
    dist.init_process_group(backend='nccl', world_size=NUM_GPUS, rank=rank)

    torch.autograd.set_detect_anomaly(True)
    model = Model().to(device).train(IS_TRAIN)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])

    x1 = torch.randn(16, 32, 128, 128, device=device)
    x2 = torch.randn(16, 32, 128, 128, device=device)

    y = model(x1) + model(x2)  # error is here
    # y = model(x1)  # everything works here
    loss = y.sum()
    loss.backward()


def main():
    os.environ['MASTER_ADDR'] = '127.0.0.1'
