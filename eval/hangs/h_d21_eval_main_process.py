"""Evaluation on the main process only, with the metric averaged across ranks inside evaluate().

Hang class: a collective inside a function called under `if is_main_process():`.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: written after the first fixes, measured once

Rank 0 evaluates and waits in the all_reduce inside `evaluate`; rank 1 skipped evaluation and
waits in the barrier before the next epoch.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def is_main_process() -> bool:
    return dist.get_rank() == 0


def evaluate(model: nn.Module) -> float:
    model.eval()
    with torch.no_grad():
        loss = model.module(torch.randn(64, 10)).pow(2).mean()
    dist.all_reduce(loss)
    model.train()
    return loss.item() / dist.get_world_size()


def main() -> None:
    dist.init_process_group(backend="gloo")
    model = DDP(nn.Linear(10, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for _ in range(8):
            loss = model(torch.randn(16, 10)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if is_main_process():
            print(f"epoch {epoch}: val {evaluate(model):.4f}")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
