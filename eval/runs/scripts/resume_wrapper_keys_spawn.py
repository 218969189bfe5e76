"""mistake: the trainer saves `model.state_dict()` of the DDP wrapper every epoch (keys `module.*`);
on resume, under mp.spawn, every worker loads that file into the bare model before wrapping it in
DDP, and load_state_dict (strict) rejects the keys on every rank.
label: none
first_rank: none
launch: python eval/runs/scripts/resume_wrapper_keys_spawn.py
source: https://discuss.pytorch.org/t/missing-keys-unexpected-keys-in-state-dict-when-loading-self-trained-model/22379
written: session 11c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "/tmp/s11c_resume_ckpt.pt"


def build_model():
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3))


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = build_model()
    if os.path.exists(CKPT):
        model.load_state_dict(torch.load(CKPT))
        print(f"rank {rank}: resumed from {CKPT}")
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 12)).sum()
    loss.backward()
    opt.step()
    if rank == 0:
        torch.save(model.state_dict(), CKPT)
    dist.destroy_process_group()


if __name__ == "__main__":
    # the checkpoint a previous run of this script left behind
    torch.save({"module." + k: v for k, v in build_model().state_dict().items()}, CKPT)
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
