# triage eval (lint clean set): https://github.com/pytorch/pytorch/issues/62967
# Pasted in the issue (SyncBatchNorm on 2 GPUs gives other outputs than BatchNorm on one, in 1.10.0, "tested
#   working in 1.8.0"); closed, labelled module: nn, triaged: a regression of PyTorch's, not of the script
#   (its duplicate pytorch#64039 says the same). Based on the DDP tutorial. Unmodified below this header up
#   to `demo_basic`'s comment "# create", where the stored copy of the thread breaks off.
import os
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.multiprocessing as mp

from torch.nn.parallel import DistributedDataParallel as DDP
import argparse


def setup(rank, world_size):
    torch.manual_seed(0)
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"

    # iniialize the process group
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self, num_features=10):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x):
        x = x.permute(0, 2, 1, 3)
        x = self.bn(x)
        x = x.permute(0, 2, 1, 3)
        return x


def demo_basic(rank, world_size, convert_sync_batchnorm):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)

    # create
