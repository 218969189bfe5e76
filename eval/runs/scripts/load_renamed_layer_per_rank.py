"""mistake: the model class renamed a layer (`fc` -> `head`) after the checkpoint was written; the
resume code calls `model.load_state_dict(torch.load(ckpt))` on every rank and fails alike on each
(one `python` per rank, env://).
label: none
first_rank: none
launch: rm -rf /tmp/r12b_ckpt && MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=0 python eval/runs/scripts/load_renamed_layer_per_rank.py & sleep 0.5; MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=1 python eval/runs/scripts/load_renamed_layer_per_rank.py; wait
source: none known
written: session 12b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "/tmp/r12b_ckpt/last.pt"


class OldNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.fc = nn.Linear(16, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(os.path.dirname(CKPT), exist_ok=True)
        torch.save(OldNet().state_dict(), CKPT)
    dist.barrier()
    model = Net()
    model.load_state_dict(torch.load(CKPT))
    model = DDP(model)
    print(f"rank {rank} resumed")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
