"""`nn.SyncBatchNorm` refuses CPU tensors, so the model carries a hand-written synchronised batch
norm that all-reduces the batch statistics in its forward while training. Validation runs on rank 0
only, and `evaluate()` forgets `model.eval()`, so the norm layers are still in training mode there.

Hang class: a collective reached only by rank 0 (inside the model's forward, called from
evaluation under `if rank == 0:`).
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 12

Rank 0 waits in the all_reduce inside `DistBatchNorm1d.forward`, called from `evaluate`; rank 1
skipped evaluation and waits in the barrier at the end of the epoch.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class DistBatchNorm1d(nn.BatchNorm1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        with torch.no_grad():
            stats = torch.cat([x.mean(0), (x * x).mean(0)])
            dist.all_reduce(stats)
            stats /= dist.get_world_size()
            mean, meansq = stats.chunk(2)
            var = meansq - mean * mean
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(12, 48), DistBatchNorm1d(48), nn.ReLU(), nn.Linear(48, 3))


def average_gradients(model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    correct = total = 0
    for x, y in batches:
        correct += (model(x).argmax(-1) == y).sum().item()
        total += len(y)
    return correct / total


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    val_batches = [(torch.randn(64, 12), torch.randint(0, 3, (64,))) for _ in range(4)]
    for epoch in range(5):
        model.train()
        for _ in range(20):
            x = torch.randn(32, 12, generator=gen)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            average_gradients(model)
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} val acc {evaluate(model, val_batches):.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
