"""mp.spawn with the tutorial's `setup(rank, world_size)`, which sets MASTER_ADDR and MASTER_PORT
itself. How the setup goes wrong comes from TRIAGE_REPRO_HOW:

- `port`: the port it hard-codes is still held by another job on this host (a previous run that
  has not exited, a colleague's job): process 0 cannot host the store there (D4);
- `no-addr`: MASTER_ADDR is never set (the line was dropped when the script moved to a cluster
  whose launcher used to set it): every process fails in init_process_group (D1);
- `nccl`: the setup asks for the NCCL backend, as the GPU version of the tutorial does, on a
  machine with no usable GPU (here the CPU-only wheel): every process fails (E9).
"""

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def setup(rank: int, world_size: int, port: int, how: str) -> None:
    if how != "no-addr":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend = "nccl" if how == "nccl" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=10))


def spawned(rank: int, world_size: int, port: int, how: str) -> None:
    """One process started by mp.spawn."""
    setup(rank, world_size, port, how)
    grads = torch.ones(16)
    dist.all_reduce(grads)
    print(f"rank {rank}: all-reduce done", flush=True)
    dist.destroy_process_group()


def main() -> None:
    how = os.environ.get("TRIAGE_REPRO_HOW", "port")
    with socket.socket() as other_job:  # the other job's store, listening on the port
        other_job.bind(("127.0.0.1", 0))
        port = other_job.getsockname()[1]
        if how == "port":
            other_job.listen()
        else:
            other_job.close()  # no other job: the port is free again
        mp.spawn(spawned, args=(2, port, how), nprocs=2)  # type: ignore[attr-defined,no-untyped-call]


if __name__ == "__main__":
    main()
