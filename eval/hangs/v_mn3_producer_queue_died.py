"""Each rank starts a decoding process (`multiprocessing.Process`) that reads its shard and feeds
ready batches through a `multiprocessing.Queue`; the training loop takes them with `queue.get()`
(no timeout). On rank 2 the decoder hits a corrupt file and dies; nothing tells the trainer.

Hang class: a rank waits forever on a queue whose only writer process is dead, outside any
collective, while the other ranks wait for it in theirs.
Label: MN3
Odd ranks: 2
Launch: torchrun 3
Held out: session 12b

Rank 2 waits in `Queue.get` in `next_batch`; ranks 0 and 1 wait in DDP's gradient all-reduce
inside `backward()`.
"""

import multiprocessing as mp

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def decoder(rank: int, queue: "mp.Queue[list[list[float]] | None]") -> None:
    for i in range(10_000):
        if rank == 2 and i == 12:
            raise ValueError(f"shard {rank}: corrupt record at offset {i * 4096}")
        queue.put(torch.randn(32, 24).tolist())
    queue.put(None)


def next_batch(queue: "mp.Queue[list[list[float]] | None]") -> torch.Tensor | None:
    rows = queue.get()
    return None if rows is None else torch.tensor(rows)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ctx = mp.get_context("spawn")
    queue: "mp.Queue[list[list[float]] | None]" = ctx.Queue(maxsize=8)
    proc = ctx.Process(target=decoder, args=(rank, queue), daemon=True)
    proc.start()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    while (batch := next_batch(queue)) is not None:
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    proc.join()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
