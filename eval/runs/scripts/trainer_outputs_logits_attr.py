"""mistake: a training loop copied from a Hugging Face example reads `outputs.logits`, but the
model here is a plain nn.Module whose forward returns the logits tensor itself, so every rank fails
with AttributeError at its first step.
label: none
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/trainer_outputs_logits_attr.py
source: none known
written: session 12, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(1000, 32)
        self.head = nn.Linear(32, 2)

    def forward(self, input_ids):
        return self.head(self.emb(input_ids))


def main():
    dist.init_process_group("gloo")
    ds = TensorDataset(torch.randint(0, 1000, (64, 12)), torch.randint(0, 2, (64,)))
    loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
    model = DDP(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            input_ids, labels = batch
            outputs = model(input_ids)
            loss = nn.functional.cross_entropy(outputs.logits, labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
