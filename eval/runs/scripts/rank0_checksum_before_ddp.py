"""mistake: rank 0 verifies the dataset's checksum (a long hash over the files) right after
init_process_group, created with timeout=timedelta(seconds=10), and only then wraps the model in
DDP; the other rank is already in DDP's constructor, whose parameter broadcast times out.
label: MN3
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank0_checksum_before_ddp.py
source: none known
written: session 12b, unseen
"""

import hashlib
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def verify_dataset():
    h = hashlib.sha256()
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:  # stands in for hashing many GB of shards
        h.update(b"x" * 1_000_000)
    print("dataset checksum", h.hexdigest()[:12])


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    if dist.get_rank() == 0:
        verify_dataset()
    model = DDP(nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 32)).sum()
    loss.backward()
    opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
