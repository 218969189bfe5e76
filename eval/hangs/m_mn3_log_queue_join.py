"""Rank 0 writes metrics through a queue and a writer thread, and flushes with `queue.join()`.

Hang class: one rank blocked outside torch (a queue whose consumer thread died), the other
waiting for it in the epoch-end barrier.
Label: MN3
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 9c

Rank 0 logs every step's metrics to a JSONL file through a background writer, so logging never
slows training. A record holding a tensor makes `json.dumps` raise in the writer thread, which
dies without `task_done()`; at the end of the epoch rank 0's `queue.join()` waits for ever, and
rank 1 waits in the barrier.
"""

import json
import os
import queue
import tempfile
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class JsonlWriter:
    def __init__(self, path: str) -> None:
        self.q: queue.Queue[dict] = queue.Queue()
        self.path = path
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        with open(self.path, "a") as f:
            while True:
                record = self.q.get()
                f.write(json.dumps(record) + "\n")
                self.q.task_done()

    def log(self, **record) -> None:
        self.q.put(record)

    def flush(self) -> None:
        self.q.join()


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    writer = JsonlWriter(os.path.join(tempfile.gettempdir(), "m_metrics.jsonl")) if rank == 0 else None
    for epoch in range(100):
        for step in range(20):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if writer is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                writer.log(epoch=epoch, step=step, loss=loss.item(), grad_norm=grad_norm)
        if writer is not None:
            writer.flush()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
