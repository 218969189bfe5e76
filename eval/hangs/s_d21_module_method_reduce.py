"""The model class carries its own `evaluate()` that averages accuracy over the ranks; the training
script calls it as `model.module.evaluate(...)` inside `if rank == 0:` to print a number.

Hang class: a collective hidden in a model method, reached through the DDP wrapper's `.module` on
rank 0 only.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 11d

After epoch 0 rank 0 waits in `evaluate()`'s `dist.all_reduce`; rank 1 has gone on to the next
epoch's `dist.barrier()`.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @torch.no_grad()
    def evaluate(self, xs: torch.Tensor, ys: torch.Tensor) -> float:
        correct = (self(xs).argmax(-1) == ys).sum().float()
        total = torch.tensor(float(len(ys)))
        stats = torch.stack([correct, total])
        dist.all_reduce(stats)
        return (stats[0] / stats[1]).item()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Classifier())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    val_x, val_y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    for epoch in range(100):
        dist.barrier()
        for _ in range(20):
            x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            acc = model.module.evaluate(val_x, val_y)
            print(f"epoch {epoch} val acc {acc:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
