"""Rank 0 flushes its metrics writer in a background thread just as the next epoch's DataLoader forks its workers.

Hang class: a DataLoader worker of one rank is deadlocked on a lock copied in the held state by
fork(); that rank waits for a batch for ever, the other waits in DDP's all-reduce.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: written in session 8 before the engine was changed, measured once

The dataset counts the samples it serves in a module-level `Stats` object guarded by a lock. At the
end of each epoch rank 0 (the only rank with a writer) flushes the stats in a thread, which holds
the lock while it writes. The next epoch's `DataLoader(num_workers=2)` forks while the lock is held:
in the workers the lock is held by a thread that does not exist there, so `__getitem__` waits in
`acquire()` for ever and rank 0's main process waits for its first batch. Rank 1 waits in DDP's
all-reduce of its first step of epoch 1.
"""

import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served = 0

    def record(self) -> None:
        with self.lock:
            self.served += 1

    def flush(self, path: str, holding: threading.Event) -> None:
        with self.lock:
            holding.set()
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(f"{self.served}\n")
                time.sleep(2.0)  # a slow network filesystem


STATS = Stats()


class Samples(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        STATS.record()
        return torch.full((4,), float(i % 7))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Samples(), batch_size=8, num_workers=2)
    for epoch in range(20):
        for batch in loader:
            loss = model(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            holding = threading.Event()
            threading.Thread(target=STATS.flush, args=("/tmp/stats.log", holding), daemon=True).start()
            holding.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
