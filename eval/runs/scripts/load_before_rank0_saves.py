"""mistake: at the end of a phase rank 0 saves the checkpoint and every rank immediately reloads it
for the next phase, with no barrier between the save and the load; rank 1 gets there first and
the file is not there yet.
label: D15
alternates: D23
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/load_before_rank0_saves.py
source: none known
"""

import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn

CKPT = os.path.join(tempfile.gettempdir(), f"phase1_{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}.pt")


def validate(rank):
    time.sleep(3 if rank == 0 else 0.1)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4))
    model(torch.randn(2, 4)).sum().backward()
    validate(rank)
    if rank == 0:
        torch.save(model.module.state_dict(), CKPT)
    state = torch.load(CKPT, map_location="cpu")
    model.module.load_state_dict(state)
    print(f"rank {rank} starts phase 2", flush=True)
    dist.barrier()
    if rank == 0:
        os.remove(CKPT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
