"""mistake: a hand-written callback system calls `cb.on_train_epoch_end(trainer, module)` (the
Lightning signature), but the user's callback defines `on_train_epoch_end(self, trainer)`; every
spawned rank fails with TypeError at the end of its first epoch. Started with mp.spawn.
label: none
first_rank: none
launch: python eval/runs/scripts/spawn_callback_signature.py
source: none known
written: session 12, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class LRLogger:
    def on_train_epoch_end(self, trainer):
        print(f"lr={trainer.opt.param_groups[0]['lr']}")


class Trainer:
    def __init__(self, module, callbacks):
        self.module, self.callbacks = module, callbacks
        self.opt = torch.optim.SGD(module.parameters(), lr=0.1)

    def fit(self):
        for epoch in range(2):
            for _ in range(3):
                loss = self.module(torch.randn(4, 6)).sum()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
            for cb in self.callbacks:
                cb.on_train_epoch_end(self, self.module)


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    Trainer(DDP(nn.Linear(6, 2)), [LRLogger()]).fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
