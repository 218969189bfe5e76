"""A hand-rolled 3-stage pipeline (one stage per rank) with point-to-point ops: each stage
receives activations from `rank - 1` and sends to `rank + 1`; the last stage sends the loss
value back to the first for logging. The first stage's receive of that loss was written with
`src=rank + 1` ("the next stage"), as its other messages go there; the loss comes from the last.

Hang class: a `dist.recv` from a source rank that sends to a different destination (a
point-to-point pairing wrong by one rank).
Label: D19
Odd ranks: 0
Launch: torchrun 3
Held out: session 12c

Rank 0 waits in `dist.recv(src=1)` for a loss rank 1 never sends; rank 1 waits in `dist.recv`
from rank 0 for the next step's activations; rank 2 waits in its `dist.send` of the loss to rank
0 (or, once that is taken, in the recv of the next activations).
"""

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    stage = nn.Sequential(nn.Linear(32, 32), nn.Tanh())
    for step in range(100):
        if rank == 0:
            act = stage(torch.randn(8, 32)).detach()
            dist.send(act, dst=rank + 1)
            loss = torch.zeros(1)
            dist.recv(loss, src=rank + 1)
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        else:
            act = torch.empty(8, 32)
            dist.recv(act, src=rank - 1)
            out = stage(act).detach()
            if rank < world - 1:
                dist.send(out, dst=rank + 1)
            else:
                dist.send(out.pow(2).mean().reshape(1), dst=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
