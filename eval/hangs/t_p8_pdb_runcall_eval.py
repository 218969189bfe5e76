"""To look into a bad validation score the user wraps the evaluation in `pdb.Pdb().runcall(...)`
on the main process only ("the others just wait"); under torchrun the debugger prompt waits on
a stdin nobody types into.

Hang class: a debugger stops one rank; the others wait in the next collective.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 11e

Rank 0 sits at the `(Pdb)` prompt of `runcall(evaluate, ...)`; rank 1 waits in the
`dist.all_reduce` that shares the score.
"""

import pdb

import torch
import torch.distributed as dist
from torch import nn


def evaluate(model: nn.Module) -> float:
    torch.manual_seed(1)
    with torch.no_grad():
        x = torch.randn(64, 8)
        return nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True)).item()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    if rank == 0:
        score = pdb.Pdb().runcall(evaluate, model)
    else:
        score = evaluate(model)
    total = torch.tensor([score])
    dist.all_reduce(total)
    print(f"mean val loss {total.item() / dist.get_world_size():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
