"""mistake: a dict-style Dataset (HF-like records) reads `example["label"]`; one record in rank 1's
shard was exported without a label field, so rank 1's __getitem__ raises KeyError at its third batch
while rank 0 waits in DDP's all-reduce. Started with mp.spawn.
label: D20
first_rank: 1
launch: python eval/runs/scripts/dataset_missing_key_rank1_spawn.py
source: https://discuss.pytorch.org/t/keyerror-in-dataloader-with-ddp-one-process-crashes/
written: session 11c, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class JsonRecords(Dataset):
    def __init__(self, n=40):
        self.records = [{"text": [float(i % 7)] * 8, "label": i % 3} for i in range(n)]
        del self.records[21]["label"]  # a malformed export line

    def __len__(self):
        return len(self.records)

    def __getitem__(self, idx):
        example = self.records[idx]
        return torch.tensor(example["text"]), example["label"]


def train(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=15))
    ds = JsonRecords()
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, shuffle=False))
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
    mp.spawn(train, args=(2,), nprocs=2, join=True)
