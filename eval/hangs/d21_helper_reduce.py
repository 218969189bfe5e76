"""Loss logging that reduces to rank 0, written so that only rank 0 ever reaches the reduce.

Hang class: a collective inside a rank test, the test inside a helper the training loop calls.
Label: D21
Odd ranks: 0
Launch: torchrun 2

`log_metrics` returns early on every rank but 0, so rank 0 alone enters `dist.reduce`; rank 1
goes on to the next step and waits in DDP's gradient all-reduce inside `backward()`.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def log_metrics(step: int, loss: torch.Tensor) -> None:
    if dist.get_rank() != 0:
        return
    total = loss.detach().clone()
    dist.reduce(total, dst=0)
    print(f"step {step} mean loss {total.item() / dist.get_world_size():.4f}", flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10_000):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 4:
            log_metrics(step, loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
