"""Rank 0 fingerprints the dataset by piping it through `sha256sum` and broadcasts the digest.

Hang class: one rank waits on a child process that waits for its own standard input (the pipe was
never closed), while the others wait in the broadcast.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 10b

`fingerprint()` starts `sha256sum` with `stdin=PIPE, stdout=PIPE`, writes the records into it and
reads its output; it never closes the child's stdin, so `sha256sum` waits for the end of its input
and rank 0 waits for its output (a pipe deadlock `communicate()` would have avoided). Rank 1 waits
in `broadcast_object_list` for the digest.
"""

import subprocess

import torch
import torch.distributed as dist
from torch import nn


def records() -> list[str]:
    return [f"{i}\tsample text number {i}\t{i % 7}" for i in range(2000)]


def fingerprint(rows: list[str]) -> str:
    proc = subprocess.Popen(
        ["sha256sum", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    for row in rows:
        proc.stdin.write(row + "\n")
    proc.stdin.flush()
    digest = proc.stdout.read().split()[0]
    proc.wait()
    return digest


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = records()
    box = [fingerprint(rows) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    print(f"rank {rank}: data {box[0][:12]}", flush=True)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for row in rows[rank::world]:
        loss = model(torch.full((1, 8), float(len(row)))).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
