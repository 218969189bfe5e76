# source: https://github.com/LibreYOLO/libreyolo/pull/531
# established (merged): without SyncBatchNorm each rank's BatchNorm tracked only its own shard under
#   DDP, degrading the converged model against single-GPU training; sync BN became the default.
# expect: TRG010
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return self.bn(self.conv(x))


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(Backbone().cuda(local_rank), device_ids=[local_rank])
    return model


if __name__ == "__main__":
    main()
