"""An interactive console opened on rank 0 when the loss spikes, to look at the batch.

Hang class: an interactive prompt (`code.interact`) on one rank under a launcher.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 9c

To find the records that blow up the loss, the user added a spike check that opens a Python
console on rank 0 with the batch in scope. Under torchrun nobody types at it: rank 0 waits at
the `>>>` prompt while rank 1 waits in the next step's gradient all-reduce.
"""

import code
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def batches(rank: int):
    g = torch.Generator().manual_seed(rank)
    for step in range(10_000):
        x = torch.randn(16, 10, generator=g)
        if step == 6:
            x[3] *= 1e3  # a corrupt record
        yield x, x.sum(dim=1, keepdim=True)


def main() -> None:
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    model = DDP(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    running = None
    for step, (x, y) in enumerate(batches(rank)):
        loss = nn.functional.mse_loss(model(x), y)
        if rank == 0 and running is not None and loss.item() > 20 * running:
            print(f"loss spike at step {step}: {loss.item():.1f} (running {running:.1f})", flush=True)
            code.interact(banner="inspect x, y, loss", local={"x": x, "y": y, "loss": loss, "model": model})
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
