"""D20 under mp.spawn, where spawn reports the survivor: process 1 raises on a NaN loss, and its
`finally:` tears the process group down, then spends a few seconds on its own clean-up (flushing a
logger, writing an emergency checkpoint). Process 0, waiting in the all-reduce, loses its peer and
dies at once, so it is the first process mp.spawn finds dead: the only traceback printed is the
survivor's `Connection closed by peer`; the error of process 1 is never shown."""

import datetime
import math
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CLEANUP_S = 5.0  # process 1's clean-up after the error, long enough that process 0 dies first


def train(rank: int) -> None:
    grads = torch.ones(16)
    for step in range(6):
        loss = float("nan") if rank == 1 and step == 2 else 1.0 / (step + 1)
        if math.isnan(loss):
            raise FloatingPointError(f"loss is nan at step {step}")
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} loss {loss:.4f}", flush=True)


def spawned(rank: int, world_size: int, port: int) -> None:
    """One process started by mp.spawn."""
    url = f"tcp://127.0.0.1:{port}"
    dist.init_process_group(
        "gloo", init_method=url, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=10)
    )
    try:
        train(rank)
    finally:
        dist.destroy_process_group()
        if rank == 1:
            time.sleep(CLEANUP_S)  # the logger's flush, an emergency checkpoint


def main() -> None:
    with socket.socket() as sock:  # a free port for the TCP store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(spawned, args=(2, port), nprocs=2)  # type: ignore[attr-defined,no-untyped-call]


if __name__ == "__main__":
    main()
