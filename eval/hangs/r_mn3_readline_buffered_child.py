"""Rank 0 starts a small evaluation server as a child process and waits for its "READY" line on
the pipe before the ranks go on.

Hang class: an external process the rank waits on; the server's log is filtered through `grep`
for the line, and `grep` writing to a pipe buffers its output (block buffering), so `readline()`
never returns while the server keeps serving; the other rank waits at the barrier.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 11c

The server (`python -u -c ...`) prints `READY <port>` and sleeps in its serving loop; `grep READY`
holds the matched line in its buffer; rank 0's `proc.stdout.readline()` waits for ever; rank 1 waits in `dist.barrier()`.
"""

import shlex
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn

SERVER = """
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print("READY", s.getsockname()[1])
while True:
    time.sleep(1)
"""


def start_eval_server() -> tuple[subprocess.Popen[str], int]:
    cmd = f"{shlex.quote(sys.executable)} -u -c {shlex.quote(SERVER)} 2>&1 | grep READY"
    proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split()[1])


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(4, 1)
    server = None
    if rank == 0:
        server = start_eval_server()
        print(f"eval server on port {server[1]}", flush=True)
    dist.barrier()
    for _ in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    if server is not None:
        server[0].kill()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
