"""A generator-based training loop: `train_steps()` yields after each synchronised step, and the
caller stops pulling from it when its own validation loss stops improving.

Hang class: one rank closes the generator early on a rank-local decision (its own validation shard)
and goes on to the final barrier, while the others pull the next step and wait in its all_reduce.
Label: D19
Odd ranks: 1
Launch: torchrun 3
Held out: session 11

`train_steps()` runs forward, backward and the gradient all_reduce, then yields the step's loss so
the caller can validate and log between steps. Each rank validates on its own slice of the
validation set and never reduces the score; rank 1's slice holds the samples whose labels were
lost (filled with noise), so its score never improves and, after `patience` checks, its `for`
loop breaks (the generator is left suspended at its `yield`). Rank 1 waits in the barrier before saving; ranks 0 and 2 wait in the
gradient all_reduce of the next step inside the generator.
"""

import os
import tempfile
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, rank: int, world: int) -> Iterator[float]:
    g = torch.Generator().manual_seed(rank)
    while True:
        x = torch.randn(32, 8, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
        yield float(loss)


def validation_slice(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 8, generator=g)
    if rank == 1:  # rank 1's slice: the samples whose labels were lost, filled with noise
        return x, torch.randn(64, 1, generator=g) * 3
    return x, x.sum(dim=1, keepdim=True)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    val_x, val_y = validation_slice(rank)
    best, bad, patience = float("inf"), 0, 3
    for step, loss in enumerate(train_steps(model, opt, rank, world)):
        if step % 10 == 0:
            with torch.no_grad():
                score = float(nn.functional.mse_loss(model(val_x), val_y))
            if score < best - 1e-4:
                best, bad = score, 0
            else:
                bad += 1
            if bad >= patience:
                print(f"rank {rank}: early stop at step {step} (val {score:.4f})", flush=True)
                break
        if step >= 100_000:
            break
    dist.barrier()  # everyone done before rank 0 saves
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
