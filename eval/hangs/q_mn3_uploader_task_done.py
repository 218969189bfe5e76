"""Rank 0 streams sample predictions to an artifact store through a background uploader thread
fed by a `queue.Queue`; at the end of evaluation it calls `queue.join()` to flush the uploads, and
the run's `finally` broadcasts the best score so every rank writes the same summary.

Hang class: one rank waits in `Queue.join()` for a `task_done` that will never come (the uploader
thread is alive, idle in `get()`; its error path skips `task_done`), while the others wait in the
`finally`'s broadcast.
Label: MN3
Odd ranks: 0
Launch: python 2
Held out: session 11b

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). An upload
that fails (a sample whose id is not a string: the store's key check raises) is logged and skipped
with `continue`, before `task_done()`, so the queue's unfinished count stays at one. Rank 1 does
not upload and waits in `dist.broadcast` in the `finally`.
"""

import logging
import queue
import threading

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("uploader")


class ArtifactStore:
    def put(self, key: object, value: list[float]) -> None:
        if not isinstance(key, str):
            raise TypeError(f"artifact key must be str, got {type(key).__name__}")


def uploader(jobs: "queue.Queue[tuple[object, list[float]]]", store: ArtifactStore) -> None:
    while True:
        key, value = jobs.get()
        try:
            store.put(key, value)
        except Exception:
            log.exception("upload of %s failed, skipping", key)
            continue
        jobs.task_done()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = torch.zeros(1)
    jobs: "queue.Queue[tuple[object, list[float]]]" = queue.Queue()
    if rank == 0:
        threading.Thread(target=uploader, args=(jobs, ArtifactStore()), daemon=True).start()
    try:
        for step in range(200):
            x = torch.randn(8, 6)
            model(x).pow(2).mean().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            scores = model(torch.randn(32, 6))
        best = scores.max().reshape(1)
        if rank == 0:
            for i, row in enumerate(scores.tolist()):
                jobs.put((f"sample-{i}" if i != 17 else i, row))
            jobs.join()  # every prediction uploaded before the summary
    finally:
        dist.broadcast(best, src=0)
        print(f"rank {rank} best {best.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
