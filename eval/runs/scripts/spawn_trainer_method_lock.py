"""mistake: the training loop is a method of a Trainer object, and mp.spawn is given the bound
method `trainer.fit` as its target; the Trainer holds a threading.Lock (for its metric writer), and
the spawn start method must pickle the bound method with its object, which the lock refuses.
label: E14
alternates: none
first_rank: none
launch: python eval/runs/scripts/spawn_trainer_method_lock.py
source: none known
written: session 11b, unseen
"""

import os
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, world_size):
        self.world_size = world_size
        self.metrics_lock = threading.Lock()
        self.history = []

    def log(self, value):
        with self.metrics_lock:
            self.history.append(value)

    def fit(self, rank):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29513")
        dist.init_process_group(
            "gloo", rank=rank, world_size=self.world_size, timeout=timedelta(seconds=10)
        )
        model = DDP(nn.Linear(8, 1))
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        self.log(loss.item())
        dist.destroy_process_group()


if __name__ == "__main__":
    trainer = Trainer(world_size=2)
    mp.spawn(trainer.fit, nprocs=2, join=True)
