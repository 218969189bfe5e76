"""mistake: the model is compiled before it is wrapped, `DDP(torch.compile(model))`, and rank 0 saves
`model.module.state_dict()` as for any DDP model; the module inside the wrapper is the compiled wrapper, so the
keys carry an `_orig_mod.` prefix, and the evaluation model built right after (plain, uncompiled) refuses the
file on every rank (mp.spawn).
label: none
alternates: E8
first_rank: none
launch: python eval/runs/scripts/compile_orig_mod_keys_spawn.py
source: none known
written: session 13, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "/tmp/r13_compile/last.pt"


def build():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29513")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.compile(build()))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(2):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        os.makedirs(os.path.dirname(CKPT), exist_ok=True)
        torch.save(model.module.state_dict(), CKPT)
        print(f"saved {CKPT}", flush=True)
    dist.barrier()
    evaluator = build()
    evaluator.load_state_dict(torch.load(CKPT))
    print(f"rank {rank}: evaluation model loaded", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
