"""A skip-bad-batch handler that tells the other ranks which batch failed with all_gather_object.

Hang class: a collective inside an exception handler that only one rank enters.
Label: D21
Odd ranks: 1
Launch: torchrun 3
Held out: session 9

The loop catches a shape error from a malformed record, gathers every rank's "bad batch" report
so rank 0 can log them together, and skips the batch. Only rank 1 meets a malformed record (a
sample with 11 features instead of 12): it waits in `all_gather_object` inside the `except`, while
ranks 0 and 2 go on to the loss all_reduce.
"""

import torch
import torch.distributed as dist
from torch import nn


def batches(rank: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    out = [torch.randn(8, 12, generator=g) for _ in range(n)]
    if rank == 1:
        out[5] = torch.randn(8, 11, generator=g)  # a record written by an older export
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(12, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, x in enumerate(batches(rank, 400)):
        try:
            loss = model(x).pow(2).mean()
        except RuntimeError as err:
            reports: list[object] = [None] * world
            dist.all_gather_object(reports, {"rank": rank, "step": step, "error": str(err)[:80]})
            if rank == 0:
                print("bad batches:", [r for r in reports if r], flush=True)
            continue
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
