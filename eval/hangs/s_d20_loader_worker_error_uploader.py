"""A DataLoader worker raises on a corrupt record on one rank; the exception ends that rank's main
thread, but the checkpoint uploader (a `ThreadPoolExecutor` task polling for new files) keeps the
process alive, so torchrun never sees it exit.

Hang class: one rank crashed with a traceback, its process does not exit, the other waits for it.
Label: D20
Odd ranks: 1
Launch: torchrun 2
Held out: session 11d

Rank 1's record 50 is corrupt: the worker's `ValueError` is re-raised in the main process at
batch 6; the interpreter then waits at exit for the executor's thread. Rank 0 waits in DDP's
all-reduce inside `backward()`.
"""

import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.rank == 1 and i == 50:
            raise ValueError(f"corrupt record {i}: bad magic bytes")
        return torch.full((6,), float(i % 7))


def upload_new_checkpoints(folder: str, stop: threading.Event) -> None:
    seen: set[str] = set()
    while not stop.is_set():
        for name in sorted(os.listdir(folder)):
            if name not in seen:
                seen.add(name)
        stop.wait(2.0)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt_dir = tempfile.mkdtemp()
    stop = threading.Event()
    uploader = ThreadPoolExecutor(max_workers=1)
    uploader.submit(upload_new_checkpoints, ckpt_dir, stop)
    torch.manual_seed(0)
    model = DDP(nn.Linear(6, 6))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Records(rank), batch_size=8, num_workers=2)
    for step, batch in enumerate(loader):
        loss = (model(batch) - batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0 and rank == 0:
            torch.save(model.module.state_dict(), os.path.join(ckpt_dir, f"step{step}.pt"))
    stop.set()
    uploader.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
