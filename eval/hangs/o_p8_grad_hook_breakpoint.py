"""A gradient-spike watcher registered as tensor hooks drops into the debugger from inside backward().

Hang class: one rank at a pdb prompt (reached from an autograd hook during `loss.backward()`)
while the others wait in the gradient all_reduce.
Label: P8
Odd ranks: 1
Launch: torchrun 2
Held out: session 10b

`watch_gradients` registers a hook on every parameter that calls `breakpoint()` when a gradient
is not finite or exceeds a limit ("look at it when it happens"). Rank 1's shard has a batch of
unscaled features at step 4; its gradient spikes and rank 1 stops at the pdb prompt inside
`backward()`, reading the launcher's stdin; rank 0 waits in all_reduce.
"""

import torch
import torch.distributed as dist
from torch import nn

GRAD_LIMIT = 50.0


def check_grad(name: str, grad: torch.Tensor) -> torch.Tensor:
    if not torch.isfinite(grad).all() or grad.abs().max() > GRAD_LIMIT:
        print(f"gradient spike in {name}: {grad.abs().max():.1f}", flush=True)
        breakpoint()
    return grad


def watch_gradients(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        p.register_hook(lambda grad, name=name: check_grad(name, grad))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(64, 16)
    if rank == 1 and step == 4:
        x *= 1000.0  # a file exported without the feature scaling
    return x, x.sum(dim=1, keepdim=True)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    watch_gradients(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(500):
        x, y = batch(rank, step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
