"""mistake: rank 1's collate function looks up a key that one of its samples lacks (a malformed
record) and raises at step 2 while rank 0 waits in DDP's all-reduce; the job is launched with
`--redirects 3`, so the workers' output goes to log files, not the terminal.
label: D20
alternates: P4
first_rank: 1
launch: torchrun --redirects 3 --nproc-per-node 2 eval/runs/scripts/collate_keyerror_redirects.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader


def records(rank):
    rows = [{"x": [float(i)] * 4, "label": i % 2} for i in range(12)]
    if rank == 1:
        del rows[5]["label"]
    return rows


def collate(batch):
    x = torch.tensor([r["x"] for r in batch])
    y = torch.tensor([r["label"] for r in batch])
    return x, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    loader = DataLoader(records(rank), batch_size=2, collate_fn=collate)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
