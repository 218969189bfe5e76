"""A DataLoader (`num_workers=2`) whose image decoder crashes its worker process on one corrupt
record (a native decoder dying with SIGSEGV). The loop pulls batches by hand inside one `try` per
step and treats any error (the handler was written for flaky network reads) as the end of the
epoch, so the rank whose worker died goes on to the end-of-epoch barrier while the other is
mid-epoch.

Hang class: one rank crashed (its DataLoader worker) and its error was swallowed; the surviving
rank waits for it in the next step's collective.
Label: D20
Odd ranks: 1
Launch: torchrun 2
Held out: session 12

Rank 1's record 90 is corrupt: its worker dies at about batch 11 of 32; the loader's SIGCHLD
handler raises "DataLoader worker (pid N) is killed by signal: Segmentation fault" in whatever
line of the step the main thread is on, the `except` ends the epoch and rank 1 waits in
`dist.barrier()`; rank 0 waits in DDP's all-reduce inside `backward()`.
"""

import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class ImageRecords(Dataset):
    def __init__(self, n: int, corrupt: set[int]) -> None:
        self.n = n
        self.corrupt = corrupt

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i in self.corrupt:
            os.kill(os.getpid(), signal.SIGSEGV)  # the native decoder dies on this record
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 8, 8, generator=g), i % 4


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    corrupt = {90} if rank == 1 else set()
    loader = DataLoader(ImageRecords(256, corrupt), batch_size=8, num_workers=2)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        it = iter(loader)
        while True:
            try:
                x, y = next(it)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            except StopIteration:
                break
            except Exception as err:
                print(f"rank {rank}: data error, ending epoch {epoch} early: {err}", flush=True)
                break
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
