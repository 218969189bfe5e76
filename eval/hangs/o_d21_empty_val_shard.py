"""Validation is sharded by hand and skipped where a rank's slice is empty.

Hang class: the evaluation's all_reduce sits behind `if len(val_loader) > 0`, which one rank
fails (3 validation files, 4 ranks), so that rank goes straight to the next barrier.
Label: D21
Odd ranks: 3
Launch: torchrun 4
Held out: session 10b

Validation files are dealt `files[rank::world]`; the guard was added to avoid a ZeroDivisionError
when computing accuracy "on a laptop with a tiny val set". With 3 files and 4 ranks, rank 3's
loader is empty: it skips `evaluate()` and waits in the checkpoint barrier while ranks 0 to 2
wait in the all_reduce of (correct, total) inside `evaluate()`'s `torch.no_grad()`.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VAL_FILES = ["val-000.pt", "val-001.pt", "val-002.pt"]


def load_val(files: list[str]) -> DataLoader:
    xs = [torch.randn(50, 8) for _ in files]
    x = torch.cat(xs) if xs else torch.empty(0, 8)
    y = (x.sum(dim=1) > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=25)


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    stats = torch.zeros(2)
    with torch.no_grad():
        for x, y in loader:
            stats[0] += (model(x).argmax(dim=1) == y).sum()
            stats[1] += len(y)
        dist.all_reduce(stats)
    model.train()
    return float(stats[0] / stats[1])


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    val_loader = load_val(VAL_FILES[rank::world])
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        for _ in range(30):
            x = torch.randn(32, 8)
            y = (x.sum(dim=1) > 0).long()
            nn.functional.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            opt.zero_grad()
        if len(val_loader) > 0:
            acc = evaluate(model, val_loader)
            print(f"rank {rank} epoch {epoch} val acc {acc:.3f}", flush=True)
        dist.barrier()  # checkpoint: every rank is done with the epoch
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
