"""mistake: batches are prefetched by a background thread filling a queue (a hand-written loader);
on rank 1 the thread hits a malformed record and dies with an exception, which only kills the
thread: rank 1's main loop then blocks forever on `queue.get()` while rank 0 waits in DDP's
gradient all-reduce (init timeout 15 s).
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/prefetch_thread_dies_rank1.py
source: none known
written: session 11, unseen
"""

import queue
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def records(rank):
    for i in range(10):
        if rank == 1 and i == 3:
            yield {"x": [0.1] * 16, "y": "?"}
        else:
            yield {"x": [float(i)] * 16, "y": i % 2}


def prefetch(rank, q):
    for rec in records(rank):
        x = torch.tensor(rec["x"]).unsqueeze(0)
        y = torch.tensor([float(rec["y"])])
        q.put((x, y))
    q.put(None)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    q = queue.Queue(maxsize=2)
    threading.Thread(target=prefetch, args=(rank, q), daemon=True).start()
    step = 0
    while True:
        item = q.get()
        if item is None:
            break
        x, y = item
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
        step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
