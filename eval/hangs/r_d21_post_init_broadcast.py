"""Evaluation settings live in a dataclass whose `__post_init__` broadcasts them from rank 0 "so
every rank agrees"; the object is built lazily, on first use, by `eval_settings()`.

Hang class: a collective hidden in an object's construction, and the first use is inside
`if rank == 0:` (the periodic sample generation), so only rank 0 builds it.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 11c

At step 20 rank 0 calls `generate_samples()`, whose `eval_settings()` constructs `EvalSettings`;
its `__post_init__` waits in `dist.broadcast`. Rank 1 has gone on to step 21's gradient
`all_reduce`.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class EvalSettings:
    temperature: float = 0.7
    max_new_tokens: int = 32
    seed: int = 1234
    _packed: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._packed = torch.tensor([self.temperature, self.max_new_tokens, self.seed], dtype=torch.float64)
        dist.broadcast(self._packed, src=0)
        self.temperature = float(self._packed[0])
        self.max_new_tokens = int(self._packed[1])
        self.seed = int(self._packed[2])


_SETTINGS: EvalSettings | None = None


def eval_settings() -> EvalSettings:
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = EvalSettings()
    return _SETTINGS


def generate_samples(model: nn.Module) -> torch.Tensor:
    settings = eval_settings()
    gen = torch.Generator().manual_seed(settings.seed)
    x = torch.randn(4, 8, generator=gen)
    with torch.no_grad():
        return model(x) / settings.temperature


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, 1000):
        x = torch.randn(16, 8)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % 20 == 0 and rank == 0:
            print(f"step {step} samples {generate_samples(model).mean():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
