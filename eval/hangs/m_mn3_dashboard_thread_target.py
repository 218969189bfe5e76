"""A progress dashboard started on rank 0 with `Thread(target=serve(port))`.

Hang class: one rank blocked outside torch (a server loop run in the main thread by mistake),
the others waiting for it in a collective.
Label: MN3
Odd ranks: 0
Launch: torchrun 3
Held out: session 9c

The dashboard was meant to run in a background thread, but `target=serve(port)` calls `serve`
at once: rank 0 sits in `serve_forever` answering HTTP requests nobody makes, while ranks 1 and 2
wait in the first gradient all-reduce.
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STATS: dict[str, float] = {}


class StatsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(STATS).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


def serve(port: int) -> None:
    ThreadingHTTPServer(("127.0.0.1", port), StatsHandler).serve_forever()


def main() -> None:
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    model = DDP(nn.Linear(20, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if rank == 0:
        port = int(os.environ["MASTER_PORT"]) + 100
        threading.Thread(target=serve(port), daemon=True).start()
    for step in range(5000):
        loss = model(torch.randn(32, 20)).logsumexp(dim=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        STATS.update(step=step, loss=loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
