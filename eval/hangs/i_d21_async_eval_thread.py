"""Rank 0 runs validation in a background thread so training does not stop; the thread averages the metric.

Hang class: a collective issued from a background thread on one rank only.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: written in session 8 before the engine was changed, measured once

Every 5 steps rank 0 starts `validate()` in a thread ("only the main process evaluates") and waits
for the previous one before starting another. `validate()` averages the accuracy across ranks
with `dist.all_reduce`, which the other rank never calls. From step 6 on rank 0 has two
collectives in flight: its validation thread's all_reduce and its main thread's gradient
all_reduce; rank 1 has one, the gradient all_reduce. The extra collective takes a place in rank
0's sequence that rank 1 never fills, and both wait.
"""

import threading

import torch
import torch.distributed as dist
from torch import nn


def validate(model: nn.Module, step: int, results: dict[int, float]) -> None:
    with torch.no_grad():
        acc = (model(torch.randn(32, 4)).argmax(1) == 0).float().mean()
    dist.all_reduce(acc)
    results[step] = float(acc) / dist.get_world_size()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    results: dict[int, float] = {}
    pending: threading.Thread | None = None
    for step in range(1, 1000):
        loss = model(torch.randn(8, 4)).logsumexp(1).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 5 == 0 and rank == 0:
            if pending is not None:
                pending.join()
            pending = threading.Thread(target=validate, args=(model, step, results), name="validation")
            pending.start()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
