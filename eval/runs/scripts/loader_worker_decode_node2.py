"""mistake: a text dataset read with open(path).readlines() decodes as UTF-8 inside a DataLoader
worker (num_workers=2); the shard read by rank 1 (on the second of two c10d "nodes") holds a line in
Latin-1, so that worker's UnicodeDecodeError is re-raised in rank 1 while rank 0 waits in DDP's
all-reduce.
label: D20
first_rank: 1
launch: rm -rf /tmp/s12_text && torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job77 eval/runs/scripts/loader_worker_decode_node2.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job77 eval/runs/scripts/loader_worker_decode_node2.py; wait
source: none known
written: session 12, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

DATA = "/tmp/s12_text"


def write_shards():
    os.makedirs(DATA, exist_ok=True)
    for r in range(2):
        lines = [f"sample {i} of shard {r}\n".encode() for i in range(64)]
        if r == 1:
            lines[40] = "caf\u00e9 cr\u00e8me, na\u00efve\n".encode("latin-1")
        with open(f"{DATA}/shard{r}.txt", "wb") as f:
            f.writelines(lines)


class Lines(Dataset):
    def __init__(self, path):
        self.path = path
        self.n = 64

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with open(self.path, encoding="utf-8") as f:
            line = f.readlines()[i]
        return torch.tensor([float(len(line))] * 4), len(line) % 2


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    if rank == 0:
        write_shards()
    dist.barrier()
    loader = DataLoader(Lines(f"{DATA}/shard{rank}.txt"), batch_size=8, num_workers=2)
    model = DDP(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
