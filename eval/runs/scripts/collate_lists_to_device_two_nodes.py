"""mistake: the custom collate function (padding token lists by hand) returns the padded `input_ids`
and `labels` as Python lists, and the training step calls `batch["input_ids"].to(device)`; every
rank fails at its first batch. Two c10d "nodes" on loopback, `--tee 3` on both.
label: none
first_rank: none
launch: torchrun --tee 3 --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bc eval/runs/scripts/collate_lists_to_device_two_nodes.py & sleep 1; torchrun --tee 3 --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bc eval/runs/scripts/collate_lists_to_device_two_nodes.py; wait
source: none known
written: session 13b, unseen
"""

import random

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

PAD = 0


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        rng = random.Random(0)
        self.items = [[rng.randrange(1, 100) for _ in range(rng.randrange(3, 12))] for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"input_ids": self.items[i], "label": len(self.items[i]) % 2}


def collate(samples):
    width = max(len(s["input_ids"]) for s in samples)
    ids = [s["input_ids"] + [PAD] * (width - len(s["input_ids"])) for s in samples]
    return {"input_ids": ids, "labels": [s["label"] for s in samples]}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(100, 32)
        self.head = nn.Linear(32, 2)

    def forward(self, ids):
        return self.head(self.emb(ids))


def main():
    dist.init_process_group("gloo")
    device = torch.device("cpu")
    ds = Tokens(256)
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds), collate_fn=collate)
    model = DDP(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for batch in loader:
        ids = batch["input_ids"].to(device)
        labels = batch["labels"].to(device)
        loss = nn.functional.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
