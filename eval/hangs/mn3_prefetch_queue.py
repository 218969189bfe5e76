"""A background thread prefetches batches into a queue; on one rank it dies on a bad record.

Hang class: a rank blocked on `queue.get()` whose producer thread is gone, while the other rank
waits in a collective.
Label: MN3
Odd ranks: 1
Launch: torchrun 2

Rank 1's reader thread raises on a malformed record (the traceback goes to stderr, the thread
ends, nothing else notices); rank 1's main thread waits in `queue.get()` for a batch that never
comes, while rank 0 waits in DDP's all-reduce inside `backward()`.
"""

import json
import queue
import threading

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def records(rank: int):
    for i in range(10_000):
        line = '{"x": [1, 2, 3, 4]}' if not (rank == 1 and i == 3) else '{"x": [1, 2,'
        yield json.loads(line)


def reader(rank: int, out: queue.Queue) -> None:
    for record in records(rank):
        out.put(torch.tensor(record["x"], dtype=torch.float32).repeat(4, 1))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batches: queue.Queue = queue.Queue(maxsize=8)
    threading.Thread(target=reader, args=(rank, batches), daemon=True).start()
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10_000):
        x = batches.get()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
