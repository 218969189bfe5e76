"""Rank 0 asks for a Hub token with `getpass` when none is configured, to push checkpoints.

Hang class: a rank held at a password prompt nobody answers (the launcher's stdin), while the
other waits in the barrier after the setup.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 11

`hub_token()` looks in the environment and the token file and, failing both, prompts. `getpass`
cannot open /dev/tty under the launcher, warns, and falls back to reading the standard input,
which stays open and silent. Rank 1 waits in `dist.barrier()`.
"""

import getpass
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def hub_token() -> str:
    token = os.environ.get("HUB_TOKEN_FOR_PUSH", "")
    path = Path.home() / ".cache" / "myhub" / "token-not-configured"
    if not token and path.exists():
        token = path.read_text().strip()
    if not token:
        token = getpass.getpass("Hub token (write access, to push checkpoints): ")
    return token


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    push_to = "team/model-run-17"
    token = hub_token() if rank == 0 else ""
    dist.barrier()  # setup done everywhere
    model = nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(200):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
        if rank == 0 and step % 100 == 99:
            print(f"step {step}: would push to {push_to} with a {len(token)}-char token", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
