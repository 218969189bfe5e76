"""Rank 0 posts metrics to an experiment-tracking server with `urlopen` and no timeout; the server stalls.

Hang class: a rank blocked in a network read outside any collective, while the other waits in one.
Label: MN3
Odd ranks: 0
Launch: python 2
Held out: session 9

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Every 5
steps rank 0 posts the loss to the tracking server. The server accepted the connection and never
answers (simulated here by a listening socket nobody serves, as an overloaded server's backlog
does); `urlopen` has no timeout, so rank 0 waits in the socket read for ever. Rank 1 waits in the
all_reduce of the next step.
"""

import json
import os
import socket
import urllib.request

import torch
import torch.distributed as dist
from torch import nn


def log_metrics(url: str, step: int, loss: float) -> None:
    body = json.dumps({"step": step, "loss": loss}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as reply:
        reply.read()


def main() -> None:
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank = dist.get_rank()
    stalled = socket.create_server(("127.0.0.1", 0))  # the tracking server: accepts, never answers
    url = f"http://127.0.0.1:{stalled.getsockname()[1]}/api/2.0/runs/log-metric"
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 1000):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if rank == 0 and step % 5 == 0:
            log_metrics(url, step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
