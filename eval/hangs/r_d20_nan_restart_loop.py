"""A "self-healing" loop: when the loss goes non-finite, the rank raises, an outer loop catches
the error, reloads the last good state and restarts the epoch, resynchronising the weights from
rank 0 first.

Hang class: one rank went NaN; it restarts on its own (the others saw a finite loss and go on),
so it waits in the restart's weight broadcast while the others wait in the gradient all_reduce.
Label: D20
Odd ranks: 1
Launch: python 2
Held out: session 11c

One `python` per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 1's shard has a row of
infinities at step 7: its loss is `inf`, `train_epoch` raises `FloatingPointError`, `main`'s
`except` reloads the snapshot and calls `sync_from_rank0`, which waits in `dist.broadcast`;
rank 0 waits in step 7's `all_reduce`.
"""

import copy

import torch
import torch.distributed as dist
from torch import nn


def sync_from_rank0(model: nn.Module) -> None:
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, data: torch.Tensor, world: int) -> None:
    for step in range(0, len(data), 8):
        x = data[step : step + 8]
        loss = model(x).pow(2).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()} at batch {step // 8}")
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(800, 6, generator=torch.Generator().manual_seed(rank))
    if rank == 1:
        data[7 * 8 + 3] = float("inf")
    snapshot = copy.deepcopy(model.state_dict())
    sync_from_rank0(model)
    epoch, restarts = 0, 0
    while epoch < 5 and restarts < 3:
        try:
            train_epoch(model, opt, data, world)
            snapshot = copy.deepcopy(model.state_dict())
            epoch += 1
        except FloatingPointError as err:
            print(f"rank {rank}: {err}; restarting epoch {epoch} from the last snapshot", flush=True)
            restarts += 1
            model.load_state_dict(snapshot)
            sync_from_rank0(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
