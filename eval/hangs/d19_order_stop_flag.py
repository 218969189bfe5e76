"""Early stopping: rank 0 decides and broadcasts, everybody averages the validation loss.

Hang class: the same two collectives issued in a different order on different ranks.
Label: D19
Odd ranks: 0
Launch: torchrun 3

Rank 0 broadcasts its stop decision before the all-reduce of the validation loss (it wants the
decision first), the others all-reduce first and then receive the decision. Rank 0 waits in
`broadcast`, ranks 1 and 2 in `all_reduce`.
"""

import torch
import torch.distributed as dist
from torch import nn


def sync_validation(val_loss: torch.Tensor, best: float, rank: int) -> tuple[float, bool]:
    stop = torch.zeros(1)
    if rank == 0:
        stop[0] = float(val_loss.item() > best)
        dist.broadcast(stop, src=0)
        dist.all_reduce(val_loss)
    else:
        dist.all_reduce(val_loss)
        dist.broadcast(stop, src=0)
    return val_loss.item() / dist.get_world_size(), bool(stop.item())


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(4, 1)
    best = float("inf")
    for epoch in range(100):
        with torch.no_grad():
            val_loss = model(torch.randn(32, 4)).pow(2).mean().reshape(1)
        mean, stop = sync_validation(val_loss, best, rank)
        best = min(best, mean)
        if stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
