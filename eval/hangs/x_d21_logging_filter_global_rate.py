"""Throughput logging through a `logging.Filter` that adds the global token rate to each record
(it all-reduces the rank's token count). Only rank 0's logger is set to INFO, "so the log is not
written N times"; the other ranks' loggers are at WARNING.

Hang class: a collective that only some ranks reach (the filter runs only where the record is
emitted, which the log level decides per rank).
Label: D21
Odd ranks: 0
Launch: python 2
Held out: session 12d

At the end of epoch 0 every rank calls `log.info(...)`; on rank 1 the record is dropped by the level
before any filter runs, so it goes on to the barrier before the checkpoint; rank 0 waits in the
filter's all_reduce.
"""

import logging
import os

import torch
import torch.distributed as dist
from torch import nn


class GlobalRateFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = 0

    def filter(self, record: logging.LogRecord) -> bool:
        t = torch.tensor([float(self.tokens)])
        dist.all_reduce(t)
        record.global_tokens = int(t.item())
        return True


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    log = logging.getLogger("train")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s (global tokens %(global_tokens)s)"))
    rate = GlobalRateFilter()
    log.addFilter(rate)
    log.addHandler(handler)
    log.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    torch.manual_seed(rank)
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for _ in range(8):
            x = torch.randn(4, 32)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            flat = torch.cat([p.grad.flatten() for p in model.parameters()])
            dist.all_reduce(flat)
            opt.step()
            rate.tokens += x.numel()
        log.info("epoch %d done", epoch)
        dist.barrier()  # checkpoint after every rank has finished the epoch
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
