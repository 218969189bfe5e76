"""mistake: "download once per node": the local main process fetches the dataset (slow, about 25 s
here) BEFORE calling `init_process_group(timeout=timedelta(seconds=10))`, and the other rank goes
straight to init; it waits there for rank 0 to join and gives up at the 10 s timeout although
rank 0 was only slow.
label: MN3
alternates: D23
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/download_before_init_timeout.py
source: none known
written: session 13b, unseen
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def download_dataset(root):
    os.makedirs(root, exist_ok=True)
    for part in range(5):
        time.sleep(5)  # stands for the network download
        print(f"downloaded part {part + 1}/5", flush=True)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if local_rank == 0:
        download_dataset("/tmp/r13b_data")
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
