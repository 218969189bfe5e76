"""A small mixture-of-experts trainer with one expert per rank (expert parallel) and a shared dense
trunk. To keep checkpoints cheap, `save_experts()` writes each rank's expert with
`torch.distributed.checkpoint.save` only "if the expert changed since the last save": a rank whose
expert the router never picked returns early. `dcp.save` is collective (its planner gathers every
rank's local plan on the coordinator and scatters the global plan back), so the ranks that did
save wait there for the one that skipped, which is already in the barrier after the save.

Hang class: a collective (the checkpoint planner's gather) that only some ranks reach; the rank
whose expert got no tokens returns before it.
Label: D21
Odd ranks: 2
Launch: torchrun 3
Held out: session 13c

Ranks 0 and 1 wait inside `dcp.save` (the planner's `all_gather_object` / `gather_object`);
rank 2 returned from `save_experts()` and waits in `dist.barrier()` in `train()`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

log = logging.getLogger("moe")


@dataclass
class Config:
    dim: int = 32
    steps: int = 40
    save_every: int = 10
    batch: int = 16
    lr: float = 0.05


class Router(nn.Module):
    def __init__(self, dim: int, experts: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x).argmax(-1)


class MoEBlock(nn.Module):
    """The dense trunk and router are replicated; each rank holds only its own expert."""

    def __init__(self, cfg: Config, rank: int, world: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.GELU())
        self.router = Router(cfg.dim, world)
        # a router biased away from the last expert, as a badly initialised gate is
        with torch.no_grad():
            self.router.gate.bias[world - 1] -= 100.0
        torch.manual_seed(100 + rank)
        self.expert = nn.Linear(cfg.dim, cfg.dim)
        self.rank = rank

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        h = self.trunk(x)
        route = self.router(h)
        mine = route == self.rank
        out = h.clone()
        out[mine] = h[mine] + self.expert(h[mine])
        return out, int(mine.sum())


class Trainer:
    def __init__(self, cfg: Config, rank: int, world: int, ckpt_dir: str) -> None:
        self.cfg, self.rank, self.world = cfg, rank, world
        self.model = MoEBlock(cfg, rank, world)
        self.head = nn.Linear(cfg.dim, 1)
        params = list(self.model.parameters()) + list(self.head.parameters())
        self.opt = torch.optim.SGD(params, lr=cfg.lr)
        self.ckpt_dir = ckpt_dir
        self.tokens_since_save = 0
        self.gen = torch.Generator().manual_seed(rank)

    def _sync_dense(self) -> None:
        for p in (
            list(self.model.trunk.parameters())
            + list(self.model.router.parameters())
            + list(self.head.parameters())
        ):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= self.world

    def save_experts(self, step: int) -> None:
        if self.tokens_since_save == 0:
            log.info("expert %d unchanged since last save, skipping", self.rank)
            return
        state = {f"expert{self.rank}": self.model.expert.state_dict(), "step": step}
        dcp.save(state, checkpoint_id=os.path.join(self.ckpt_dir, f"step{step}"))
        self.tokens_since_save = 0

    def train(self) -> None:
        for step in range(1, self.cfg.steps + 1):
            x = torch.randn(self.cfg.batch, self.cfg.dim, generator=self.gen)
            y = x.sum(-1, keepdim=True)
            out, routed = self.model(x)
            self.tokens_since_save += routed
            loss = nn.functional.mse_loss(self.head(out), y)
            self.opt.zero_grad()
            loss.backward()
            self._sync_dense()
            self.opt.step()
            if step % self.cfg.save_every == 0:
                self.save_experts(step)
                dist.barrier()
                if self.rank == 0:
                    log.info("step %d loss %.4f, checkpoint written", step, loss.item())


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    logging.basicConfig(level=logging.INFO, format=f"[rank{rank}] %(message)s")
    ckpt_dir = os.environ.get("CKPT_DIR") or tempfile.gettempdir() + "/moe_ckpt"
    Trainer(Config(), rank, world, ckpt_dir).train()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
