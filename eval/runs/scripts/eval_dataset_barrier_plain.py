"""mistake: the project's Dataset class does "rank 0 downloads, the others wait" inside
`__init__` (`if dist.get_rank() != 0: dist.barrier()`); the standalone evaluation script imports
it and is run with plain `python evaluate.py`, where no process group exists.
label: E4
alternates: D1
first_rank: none
launch: python eval/runs/scripts/eval_dataset_barrier_plain.py
source: https://github.com/pytorch/vision/issues/2024
written: session 12b, unseen
"""

import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

ROOT = "/tmp/r12b_data"


class CachedDigits(Dataset):
    def __init__(self, root, split="val"):
        if dist.get_rank() != 0:
            dist.barrier()
        path = os.path.join(root, f"{split}.pt")
        if not os.path.exists(path):
            os.makedirs(root, exist_ok=True)
            torch.save((torch.randn(64, 8), torch.randint(0, 10, (64,))), path)
        if dist.get_rank() == 0:
            dist.barrier()
        self.x, self.y = torch.load(path)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    model = torch.nn.Linear(8, 10)
    loader = DataLoader(CachedDigits(ROOT), batch_size=16)
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    print(f"accuracy {correct / 64:.3f}")


if __name__ == "__main__":
    main()
