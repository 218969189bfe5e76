"""D8 (gradient checkpointing): reentrant activation checkpointing inside a DDP model that was told
to look for unused parameters. Each checkpointed block runs its own inner backward, DDP's hook for
the block's parameters fires twice, and the reducer stops: "marked as ready twice"."""

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = checkpoint(self.block, x, use_reentrant=True)  # the old default, kept by many codebases
        x = checkpoint(self.block, x, use_reentrant=True)  # the same block applied twice (weight sharing)
        out: torch.Tensor = self.head(x)
        return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4, 8, requires_grad=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
