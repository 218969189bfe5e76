"""One rank's training loop dies on an exception; a non-daemon metrics thread keeps it alive.

Hang class: a rank that crashed (its traceback printed) but whose process never exits, so the
launcher never notices and the other rank waits for it forever.
Label: D20
Odd ranks: 1
Launch: torchrun 2

Rank 1 raises a KeyError at step 3; its main thread is gone (the interpreter waits for the
non-daemon heartbeat thread at exit), so rank 0 waits in DDP's all-reduce inside `backward()`.
"""

import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def heartbeat(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(1.0)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stop = threading.Event()
    threading.Thread(target=heartbeat, args=(stop,), name="heartbeat").start()
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    schedule = {0: 0.1, 1: 0.1, 2: 0.05}
    for step in range(1_000):
        lr = schedule[step] if rank == 1 else schedule.get(step, 0.01)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    stop.set()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
