"""Evaluation predictions go through a writer object whose `close()` (called from `__del__`) waits for every rank's file.

Hang class: a barrier that runs from a finalizer on one rank only: the writer is created on rank 0
alone, and it is closed when `evaluate()` returns and its last reference goes away.
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 10b

`PredictionWriter` was written when every rank wrote its own predictions file: its `close()`
waits at a barrier so that the merge step finds every shard on disk, and `__del__` closes it so a
forgotten `close()` cannot lose rows. Later the writer was made rank 0's only ("the others' files
were duplicates"). At the end of epoch 0's evaluation rank 0's writer is collected when
`evaluate()` returns and its `__del__` waits in `dist.barrier()`; rank 1 has gone on to epoch 1
and waits in the gradient all_reduce.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class PredictionWriter:
    def __init__(self, path: str) -> None:
        self.handle = open(path, "w")

    def write(self, preds: torch.Tensor) -> None:
        self.handle.write("\n".join(str(int(p)) for p in preds) + "\n")

    def close(self) -> None:
        if not self.handle.closed:
            self.handle.close()
            dist.barrier()  # every rank's predictions are on disk before the merge

    def __del__(self) -> None:
        self.close()


def evaluate(model: nn.Module, rank: int, epoch: int) -> float:
    writer = None
    if rank == 0:
        writer = PredictionWriter(os.path.join(tempfile.gettempdir(), f"preds-e{epoch}.txt"))
    correct = 0
    with torch.no_grad():
        for _ in range(5):
            x, y = torch.randn(32, 20), torch.randint(0, 4, (32,))
            preds = model(x).argmax(dim=1)
            correct += int((preds == y).sum())
            if writer is not None:
                writer.write(preds)
    return correct / 160


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "12361"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for _ in range(20):
            x, y = torch.randn(32, 20), torch.randint(0, 4, (32,))
            nn.functional.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            opt.zero_grad()
        acc = evaluate(model, rank, epoch)
        if rank == 0:
            print(f"epoch {epoch} accuracy {acc:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
