"""mistake: an ordinary model bug: the classifier's input size (128) does not match the encoder's
output (64); every rank raises the same shape error in forward. Nothing distributed is wrong.
label: none
alternates: P4
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/matmul_shape_all_ranks.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.GELU())
        self.classifier = nn.Linear(128, 10)

    def forward(self, x):
        return self.classifier(self.encoder(x))


def main():
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(Model())
    out = model(torch.randn(4, 32))
    out.sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
