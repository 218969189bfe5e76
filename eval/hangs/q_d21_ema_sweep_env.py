"""A hyperparameter sweep: the sweep agent (run on the main process only, like `wandb.agent`)
exports the trial's parameters into `os.environ`, and the training code reads them from there.
The EMA of the weights is kept in step across ranks by broadcasting rank 0's copy, but only when
`EMA_DECAY > 0`.

Hang class: a collective reached only on the rank whose configuration enables it (the config came
from an env var set on one rank), while the others wait in the gradient all_reduce.
Label: D21
Odd ranks: 0
Launch: python 2
Held out: session 11b

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0
calls `apply_sweep_params()`, which sets `EMA_DECAY=0.999` in its environment; rank 1 reads the
default `0`. Every 10 steps rank 0 broadcasts its EMA weights; rank 1 never does and waits in
the all_reduce of the next step.
"""

import copy
import json
import os

import torch
import torch.distributed as dist
from torch import nn


def apply_sweep_params() -> None:
    trial = json.loads('{"LR": "0.05", "EMA_DECAY": "0.999", "WARMUP": "50"}')  # from the agent
    for key, value in trial.items():
        os.environ[key] = value


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        apply_sweep_params()
    lr = float(os.environ.get("LR", "0.05"))
    ema_decay = float(os.environ.get("EMA_DECAY", "0"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1))
    ema = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(1, 2000):
        x = torch.randn(32, 16)
        (model(x) - x.mean(dim=1, keepdim=True)).pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        if ema_decay > 0:
            with torch.no_grad():
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.mul_(ema_decay).add_(p, alpha=1 - ema_decay)
            if step % 10 == 0:
                for e in ema.parameters():
                    dist.broadcast(e, src=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
