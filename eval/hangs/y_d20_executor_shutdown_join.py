"""Checkpoints are uploaded in the background: `train()` submits a long-lived uploader loop to a
`ThreadPoolExecutor` that takes paths from a queue. A rank that raises leaves `train()` with its
traceback printed, but the interpreter's exit joins the executor's threads (concurrent.futures'
exit hook), and the uploader loop waits on its queue for ever: the process never exits.

Hang class: one rank crashed (its traceback printed) but its process stays alive in interpreter
shutdown, so the others wait for it in the next collective.
Label: D20
Odd ranks: 1
Launch: python 2
Held out: session 13

Rank 1 raises a ValueError on a malformed sample at step 4; its main thread waits in
`threading._shutdown` joining the uploader thread; rank 0 waits in the gradient all_reduce.
"""

import queue
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch import nn

UPLOADS: "queue.Queue[str | None]" = queue.Queue()


def uploader_loop() -> int:
    done = 0
    while True:
        path = UPLOADS.get()
        if path is None:
            return done
        done += 1


def get_batch(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 4:
        raise ValueError(f"malformed sample in shard {rank} at step {step}")
    return torch.randn(8, 16)


def train(model: nn.Module, pool: ThreadPoolExecutor) -> None:
    rank = dist.get_rank()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pool.submit(uploader_loop)
    for step in range(1000):
        loss = model(get_batch(rank, step)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 50 == 49:
            path = f"/tmp/exec-demo-rank{rank}-{step}.pt"
            torch.save(model.state_dict(), path)
            UPLOADS.put(path)
    UPLOADS.put(None)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    pool = ThreadPoolExecutor(max_workers=1)
    train(nn.Linear(16, 4), pool)
    pool.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
