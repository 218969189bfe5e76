"""A dataset that rebuilds a stale index under a file lock and returns still holding it; DataLoader workers wait for the lock.

Hang class: a rank stuck in its data loading (its DataLoader workers wait on a file lock its main
process holds), outside any collective, while the other rank waits in one.
Label: MN3
Odd ranks: 1
Launch: torchrun 2
Held out: session 9

Each rank reads its own shard through a small index guarded by a `fcntl` lock (workers take it
shared to read, a rebuild takes it exclusive). Rank 1's shard was re-exported after its index was
written, so its dataset rebuilds the index and `return`s from that branch without unlocking. Its
two DataLoader workers block in `flock(LOCK_SH)`, its main process waits for their batches; rank 0
waits in DDP's gradient all-reduce.
"""

import fcntl
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


def export_shard(root: str, rank: int) -> None:
    rows = torch.randn(64, 10)
    torch.save(rows, os.path.join(root, f"shard{rank}.pt"))
    torch.save({"rows": len(rows)}, os.path.join(root, f"shard{rank}.idx"))
    if rank == 1:  # re-exported with more rows after its index was written
        torch.save(torch.randn(80, 10), os.path.join(root, f"shard{rank}.pt"))


class IndexedShard(Dataset[torch.Tensor]):
    def __init__(self, root: str, rank: int) -> None:
        self.data_path = os.path.join(root, f"shard{rank}.pt")
        self.index_path = os.path.join(root, f"shard{rank}.idx")
        self.lock_path = os.path.join(root, f"shard{rank}.lock")
        self._lock = open(self.lock_path, "a+")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        rows = torch.load(self.data_path)
        self.length = len(rows)
        if torch.load(self.index_path)["rows"] != self.length:
            torch.save({"rows": self.length}, self.index_path)
            return
        fcntl.flock(self._lock, fcntl.LOCK_UN)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.lock_path) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            return torch.load(self.data_path)[i]


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = os.path.join(tempfile.gettempdir(), f"shards_{os.getppid()}")
    os.makedirs(root, exist_ok=True)
    export_shard(root, rank)
    loader = DataLoader(IndexedShard(root, rank), batch_size=8, num_workers=2)
    model = DDP(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(100):
        for x in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
