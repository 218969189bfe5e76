"""mistake: rank 1's shard holds a record whose label field is the string "n/a"; the Dataset's
__getitem__ converts it with int() inside a DataLoader worker (num_workers=2), the worker's
ValueError is re-raised in rank 1's main process at its third batch, while rank 0 waits in DDP's
all-reduce.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/loader_worker_raises_rank1.py
source: none known
written: session 10, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Records(Dataset):
    def __init__(self, n):
        self.rows = [{"x": [float(i % 7)] * 8, "label": str(i % 3)} for i in range(n)]
        self.rows[13]["label"] = "n/a"  # one malformed row in the export

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return torch.tensor(row["x"]), int(row["label"])


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    ds = Records(40)
    loader = DataLoader(
        ds, batch_size=4, sampler=DistributedSampler(ds, shuffle=False), num_workers=2
    )
    model = DDP(nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
