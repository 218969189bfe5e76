"""mistake: fine-tuning resumes from a checkpoint written by a single-process pretraining run
(plain model, keys like `encoder.weight`), loaded with `model.load_state_dict(...)` after the model
was wrapped in DDP, whose keys start with `module.`; every rank raises.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_load_bare_checkpoint.py
source: none known
written: session 10, unseen
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    path = os.path.join(tempfile.gettempdir(), f"pretrain_{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}.pt")
    if rank == 0:
        torch.save(Net().state_dict(), path)  # what the pretraining run wrote
    dist.barrier()
    model = DDP(Net())
    model.load_state_dict(torch.load(path, map_location="cpu"))
    print(f"rank {rank}: resumed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
