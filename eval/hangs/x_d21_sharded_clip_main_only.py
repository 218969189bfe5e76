"""ZeRO-style training by hand: the flat parameter vector is split into one shard per rank, each
rank steps only its shard and the shards are all-gathered back. Gradient clipping of the shards
(`clip_sharded_grad_norm_`, which all-reduces the squared local norms as FSDP's
`clip_grad_norm_` does) is done only on rank 0, "since rank 0 logs the norm".

Hang class: a collective inside a helper called under a rank test (the helper's all_reduce is
reached by rank 0 alone).
Label: D21
Odd ranks: 0
Launch: torchrun 3
Held out: session 12d

Rank 0 waits in the all_reduce inside `clip_sharded_grad_norm_`; ranks 1 and 2 wait in the
barrier after the optimizer step.
"""

import torch
import torch.distributed as dist
from torch import nn


def clip_sharded_grad_norm_(shard_grad: torch.Tensor, max_norm: float) -> float:
    sq = shard_grad.pow(2).sum().reshape(1)
    dist.all_reduce(sq)
    total = float(sq.sqrt())
    if total > max_norm:
        shard_grad.mul_(max_norm / (total + 1e-6))
    return total


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(24, 48), nn.Tanh(), nn.Linear(48, 6))
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    pad = (-len(flat)) % world
    flat = torch.cat([flat, torch.zeros(pad)])
    n = len(flat) // world
    shard = flat[rank * n : (rank + 1) * n].clone()
    for step in range(20):
        loss = model(torch.randn(8, 24)).pow(2).mean()
        model.zero_grad()
        loss.backward()
        g = torch.cat([p.grad.flatten() for p in model.parameters()] + [torch.zeros(pad)])
        dist.all_reduce(g)
        shard_grad = g[rank * n : (rank + 1) * n] / world
        if rank == 0:
            norm = clip_sharded_grad_norm_(shard_grad, max_norm=1.0)
            print(f"step {step} grad norm {norm:.3f}", flush=True)
        shard -= 0.01 * shard_grad
        dist.barrier()  # every shard stepped before the gather
        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard)
        torch.nn.utils.vector_to_parameters(torch.cat(parts)[: len(flat) - pad], model.parameters())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
