"""A training loop that drops into `pdb.post_mortem()` on any exception, left in for a cluster run.

Hang class: one rank sits at a pdb prompt nobody answers while the others wait in a collective.
Label: P8
Odd ranks: 2
Launch: torchrun 3
Held out: session 9

Rank 2's shard holds a label outside the 5 classes; `cross_entropy` raises IndexError at its
fourth batch, the handler prints the traceback and opens the post-mortem debugger reading stdin.
Ranks 0 and 1 wait in DDP's gradient all-reduce.
"""

import pdb
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def shard(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(rank)
    out = [(torch.randn(8, 6, generator=g), torch.randint(0, 5, (8,), generator=g)) for _ in range(n)]
    if rank == 2:
        out[3][1][4] = 7  # mislabelled row
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(6, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        for x, y in shard(rank, 2000):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    except Exception:
        traceback.print_exc()
        pdb.post_mortem()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
