"""mistake: a Dataset whose `__getitem__` parses a text record; rank 0's shard holds a malformed
record, so one of rank 0's DataLoader workers (num_workers=2) raises ValueError, re-raised in rank
0's main process, while rank 1 waits for rank 0's gradients in DDP's all-reduce. `--tee 3`.
label: D20
first_rank: 0
launch: torchrun --tee 3 --nproc-per-node 2 eval/runs/scripts/loader_worker_raises_rank0_tee.py
source: none known
written: session 12c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Records(Dataset):
    def __init__(self):
        self.rows = [f"{i},{i * 0.5},{i % 3}" for i in range(32)]
        self.rows[20] = "20,0.5"  # a truncated line in the export

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        idx, feat, label = self.rows[i].split(",")
        return torch.tensor([float(feat)] * 4), int(label)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    ds = Records()
    sampler = DistributedSampler(ds, shuffle=False)
    loader = DataLoader(ds, batch_size=2, sampler=sampler, num_workers=2)
    model = DDP(nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
