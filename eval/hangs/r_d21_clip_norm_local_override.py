"""Gradient clipping is configured from a base YAML merged with a node-local override file; the
clipping helper all_reduces the squared norms (the model's parameters are split across ranks by
a hand-written ZeRO-1-style partition) only when `max_norm` is set.

Hang class: a collective inside a helper whose guard reads per-rank configuration: the node that
has the override (rank 0's) clips, the other does not.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 11c

`load_config` merges `train_local.yaml` from the node's scratch directory, which only the first
node has (left there by a debugging session, it sets `optim.max_norm: 1.0`). Rank 0 waits in
`clip_grad_norm_sharded`'s `all_reduce`; rank 1 skipped clipping, stepped its partition and
waits in the first parameter `broadcast` after the step.
"""

import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from torch import nn

BASE = """
optim:
  lr: 0.05
  max_norm: null
train:
  steps: 200
"""


def node_scratch(rank: int) -> Path:
    # one scratch directory per node; here one node per rank
    path = Path(tempfile.gettempdir()) / f"h11c-clip-node{rank}"
    path.mkdir(exist_ok=True)
    if rank == 0:
        (path / "train_local.yaml").write_text("optim:\n  max_norm: 1.0\n")
    return path


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) else value
    return out


def load_config(scratch: Path) -> dict[str, Any]:
    cfg = yaml.safe_load(BASE)
    local = scratch / "train_local.yaml"
    if local.exists():
        cfg = merge(cfg, yaml.safe_load(local.read_text()))
    return cfg


def clip_grad_norm_sharded(params: list[nn.Parameter], max_norm: float | None) -> float | None:
    if max_norm is None:
        return None
    sq = torch.stack([p.grad.pow(2).sum() for p in params if p.grad is not None]).sum()
    dist.all_reduce(sq)
    norm = sq.sqrt()
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(scale)
    return float(norm)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = load_config(node_scratch(rank))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    params = list(model.parameters())
    mine = params[rank::world]  # this rank's partition of the optimizer state
    opt = torch.optim.SGD(mine, lr=cfg["optim"]["lr"])
    for step in range(cfg["train"]["steps"]):
        seed = torch.tensor([step * 7919])
        dist.broadcast(seed, src=0)
        gen = torch.Generator().manual_seed(int(seed) + rank)
        x = torch.randn(32, 16, generator=gen)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        loss.backward()
        clip_grad_norm_sharded(mine, cfg["optim"]["max_norm"])
        opt.step()
        for i, p in enumerate(params):
            dist.broadcast(p.data, src=i % world)
            p.grad = None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
