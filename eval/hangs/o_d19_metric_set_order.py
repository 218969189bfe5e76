"""Metrics are synced per name by iterating over a set of names; each process orders the set its own way.

Hang class: ranks issue their collectives in different orders (string hashing is randomized per
process, so `set` iteration order differs between ranks) and two of them meet in different
collectives.
Label: D19
Odd ranks:
Launch: torchrun 3
Held out: session 10b

`sync_metrics` builds `set(local) | set(REQUIRED)` (some metrics are logged only now and then)
and, for each name, all-reduces tensors and all-gathers the rest (lists of sample ids with a high
loss). The order of the set is each process's own; at the first step where the ranks' orders put
a tensor against a list, the ranks wait in different collectives (an all_reduce against the
all_gather of `all_gather_object`).
"""

import torch
import torch.distributed as dist
from torch import nn

REQUIRED = ("loss", "grad_norm", "tokens", "hard_ids", "skipped_ids")


def sync_metrics(local: dict[str, object], world: int) -> dict[str, object]:
    synced: dict[str, object] = {}
    for name in set(local) | set(REQUIRED):
        value = local.get(name, torch.zeros(1) if not name.endswith("_ids") else [])
        if isinstance(value, torch.Tensor):
            value = value.clone()
            dist.all_reduce(value)
            synced[name] = value / world
        else:
            gathered: list[object] = [None] * world
            dist.all_gather_object(gathered, value)
            synced[name] = [i for part in gathered for i in part]  # type: ignore[union-attr]
    return synced


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        x = torch.randn(16, 10)
        losses = model(x).pow(2).squeeze(1)
        loss = losses.mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        local: dict[str, object] = {
            "loss": loss.detach().reshape(1),
            "tokens": torch.tensor([16.0]),
            "hard_ids": [step * 16 + int(i) for i in torch.nonzero(losses > 2.0).flatten()],
        }
        metrics = sync_metrics(local, world)
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {float(metrics['loss']):.3f}", flush=True)  # type: ignore[arg-type]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
