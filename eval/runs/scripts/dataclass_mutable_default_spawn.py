"""mistake: the training config is a dataclass with a list default (`milestones: list = [30,
60]`), defined where each worker loads its config after joining the group; Python rejects the
mutable default, so every spawned process fails alike (mp.spawn).
label: none
first_rank: none
launch: python eval/runs/scripts/dataclass_mutable_default_spawn.py
source: none known
written: session 12c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def load_config():
    from dataclasses import dataclass

    @dataclass
    class TrainConfig:
        lr: float = 0.1
        epochs: int = 3
        milestones: list = [30, 60]

    return TrainConfig()


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    cfg = load_config()
    t = torch.tensor([cfg.lr])
    dist.all_reduce(t)
    print(rank, t.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29563")
    mp.spawn(worker, args=(2,), nprocs=2)
