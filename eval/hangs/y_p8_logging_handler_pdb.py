"""A "debug on error" logging handler: while chasing a loss spike the user attached a handler that
opens pdb whenever something is logged at ERROR, so the first bad step stops where it happened.
The job is then launched with torchrun as usual, the handler still attached.

Hang class: one rank at a debugger prompt (reached through the logging handler) under a launcher
nobody types in, while the other waits in the next collective.
Label: P8
Odd ranks: 1
Launch: torchrun 2
Held out: session 13

Rank 1's fourth batch holds an inf: its loss is not finite, it logs an error and sits at the pdb
prompt inside the handler's `emit`; rank 0 waits in the gradient all_reduce.
"""

import logging
import pdb

import torch
import torch.distributed as dist
from torch import nn

logger = logging.getLogger("train")


class PdbOnError(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            print(self.format(record), flush=True)
            pdb.set_trace()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logger.addHandler(logging.StreamHandler())
    logger.addHandler(PdbOnError())
    logger.setLevel(logging.INFO)
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100):
        x = torch.randn(8, 16)
        if rank == 1 and step == 3:
            x[0, 0] = float("inf")
        loss = model(x).pow(2).mean()
        if not torch.isfinite(loss):
            logger.error("non-finite loss %s at step %d", loss.item(), step)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
