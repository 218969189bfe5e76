"""A `pdb.set_trace()` left in the collate function to look at a malformed sample.

Hang class: one rank sits at a debugger prompt deep inside the DataLoader while the other waits
in the gradient all-reduce.
Label: P8
Odd ranks: 1
Launch: torchrun 2
Held out: session 10

While chasing a tokenisation bug the user put `import pdb; pdb.set_trace()` in `collate()` under
"if any sample is longer than the model's context", and forgot it there. Only rank 1's shard has
such a sample (at its 12th batch); with `num_workers=0` the collate runs in the rank's main
process, so rank 1 waits at the `(Pdb)` prompt (the launcher's stdin stays open) and rank 0 in
DDP's all-reduce.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

CONTEXT = 64


class Lines(Dataset):
    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i: int) -> torch.Tensor:
        n = 300 if i == 93 else 8 + i % 40  # one runaway line in the corpus
        return torch.arange(n) % 97 + 1


def collate(samples: list[torch.Tensor]) -> torch.Tensor:
    if any(len(s) > CONTEXT for s in samples):
        import pdb

        pdb.set_trace()
    out = torch.zeros(len(samples), CONTEXT, dtype=torch.long)
    for i, s in enumerate(samples):
        out[i, : min(len(s), CONTEXT)] = s[:CONTEXT]
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = Lines()
    loader = DataLoader(
        data, batch_size=4, collate_fn=collate,
        sampler=DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False),
    )  # fmt: skip
    model = DDP(nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * CONTEXT, 100)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for ids in loader:
            loss = nn.functional.cross_entropy(model(ids), ids[:, 0])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
