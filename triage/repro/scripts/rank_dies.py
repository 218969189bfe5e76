"""Rank 1 dies at step 2 of a training loop. How it dies comes from TRIAGE_REPRO_HOW:

- `raise`: the loss went NaN and the loop raises (D20);
- `exit`: a validation helper calls sys.exit(3), its message sent to a logger nobody reads (P4);
- `kill`: the kernel's OOM killer sends SIGKILL, so nothing is printed (X3);
- `segv`: a buggy C/CUDA extension reads address 0 (P6).

Launched by torchrun (RANK is set) it is one rank of the job, and rank 0 waits for rank 1 in the
all-reduce. Run with plain `python` it starts both ranks itself with torch.multiprocessing.spawn,
and rank 0 is still in a long evaluation of its own when rank 1 dies: mp.spawn reports the first
process it finds dead and stops the others, so the survivor must not die of the lost connection
at the same moment (mp.spawn could report either death)."""

import ctypes
import datetime
import math
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = datetime.timedelta(seconds=10)


def die(how: str, step: int) -> None:
    """End this rank the way TRIAGE_REPRO_HOW says."""
    if how == "exit":
        sys.exit(3)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segv":
        ctypes.string_at(0)
    raise FloatingPointError(f"loss is nan at step {step}")


def train(rank: int, how: str, evaluate_s: float = 0.0) -> None:
    """The training loop of one rank, in a process group that exists; rank 1 dies at step 2, when
    rank 0 evaluates for `evaluate_s` seconds before its all-reduce."""
    grads = torch.ones(16)
    for step in range(6):
        loss = float("nan") if rank == 1 and step == 2 else 1.0 / (step + 1)
        if math.isnan(loss):
            die(how, step)
        if rank == 0 and step == 2:
            time.sleep(evaluate_s)
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


def spawned(rank: int, world_size: int, port: int, how: str) -> None:
    """One process started by mp.spawn: it joins the group at the address main() chose."""
    url = f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world_size, timeout=TIMEOUT)
    train(rank, how, evaluate_s=60.0)  # longer than the run: mp.spawn stops it


def main() -> None:
    """One rank under torchrun, or both ranks through mp.spawn."""
    how = os.environ.get("TRIAGE_REPRO_HOW", "raise")
    if "RANK" in os.environ:
        dist.init_process_group("gloo", timeout=TIMEOUT)
        train(dist.get_rank(), how)
        return
    with socket.socket() as sock:  # a free port for the TCP store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(spawned, args=(2, port, how), nprocs=2)  # type: ignore[attr-defined,no-untyped-call]


if __name__ == "__main__":
    main()
