"""mistake: an ordinary bug: tokenised sentences of different lengths go through the DataLoader's
default collate (no padding collate_fn), which cannot stack them; every rank raises on its first
batch. Nothing distributed is wrong. Launched with `python -m torch.distributed.run --tee 3`.
label: none
first_rank: none
launch: python -m torch.distributed.run --tee 3 --nproc-per-node 2 eval/runs/scripts/collate_variable_length.py
source: https://discuss.pytorch.org/t/runtimeerror-stack-expects-each-tensor-to-be-equal-size/87195
written: session 11c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

SENTENCES = ["the cat sat", "a dog ran to the park", "hello", "we went home late at night", "ok then"] * 4


class Tokenized(Dataset):
    def __init__(self, sentences):
        self.ids = [torch.tensor([hash(w) % 100 for w in s.split()]) for s in sentences]

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i], len(self.ids[i]) % 2


def main():
    dist.init_process_group("gloo")
    ds = Tokenized(SENTENCES)
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds))
    model = DDP(nn.EmbeddingBag(100, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for ids, y in loader:
        loss = nn.functional.cross_entropy(model(ids), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
