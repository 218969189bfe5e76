"""A hand-written FSDP-like wrapper: each rank keeps one flat shard of the parameters and
all-gathers the full flat vector for each forward; `state_dict()` gathers it the same way to hand
back full tensors. The checkpoint is written as the unsharded habit has it,
`if rank == 0: torch.save(model.state_dict(), path)`.

Hang class: a collective reached only by rank 0 (an all_gather inside `state_dict()` called under
a rank test).
Label: D21
Odd ranks: 0
Launch: python 2
Held out: session 12

At the first checkpoint (step 50) rank 0 waits in the all_gather inside `FlatShardModule._gather`,
called from `state_dict`; rank 1 waits in the barrier after the save.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call


class FlatShardModule(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [p.shape for p in module.parameters()]
        flat = torch.cat([p.detach().flatten() for p in module.parameters()])
        self.numel = flat.numel()
        padded = nn.functional.pad(flat, (0, -self.numel % self.world))
        self.shard = nn.Parameter(padded.chunk(self.world)[self.rank].clone())
        self.module = module.requires_grad_(False)
        self._full: torch.Tensor | None = None

    def _gather(self) -> torch.Tensor:
        parts = [torch.empty_like(self.shard) for _ in range(self.world)]
        dist.all_gather(parts, self.shard.detach())
        return torch.cat(parts)[: self.numel]

    def _unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        out, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            n = shape.numel()
            out[name] = flat[offset : offset + n].view(shape)
            offset += n
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._full = self._gather().requires_grad_()
        return functional_call(self.module, self._unflatten(self._full), (x,))

    def reduce_gradients(self) -> None:
        assert self._full is not None and self._full.grad is not None
        grad = nn.functional.pad(self._full.grad, (0, -self.numel % self.world))
        dist.all_reduce(grad)
        self.shard.grad = (grad / self.world).chunk(self.world)[self.rank].clone()

    def state_dict(self, *args, **kwargs):  # type: ignore[override]
        return {k: v.clone() for k, v in self._unflatten(self._gather()).items()}


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(0)
    model = FlatShardModule(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.Adam([model.shard], lr=1e-3)
    ckpt_dir = tempfile.mkdtemp(prefix="u_flat_ckpt_")
    for step in range(1, 201):
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        model.reduce_gradients()
        opt.step()
        if step % 50 == 0:
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(ckpt_dir, f"step{step}.pt"))
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
