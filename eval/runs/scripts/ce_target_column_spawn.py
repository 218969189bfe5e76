"""mistake: the class labels are read from the CSV as a column, shape (N, 1), and given to
`nn.CrossEntropyLoss` as they are; every rank fails alike in the loss (mp.spawn, the tutorial's
setup()).
label: none
first_rank: none
launch: python eval/runs/scripts/ce_target_column_spawn.py
source: none known
written: session 12b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


def load_csv(n=16):
    features = torch.randn(n, 5)
    labels = torch.randint(0, 3, (n, 1))  # df[["label"]].values
    return features, labels


def demo_basic(rank, world_size):
    setup(rank, world_size)
    model = DDP(nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    criterion = nn.CrossEntropyLoss()
    x, y = load_csv()
    opt.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    opt.step()
    cleanup()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(demo_basic, args=(world_size,), nprocs=world_size, join=True)
