"""mistake: an HPC tutorial's script asks for `backend="mpi"` and the ranks are started by hand,
one `python` per rank with env:// (no mpirun here); the pip wheel of torch is built without MPI,
so every rank fails creating the process group.
label: none
alternates: E2
first_rank: none
launch: RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 python eval/runs/scripts/mpi_backend_cpu_wheel.py & RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 python eval/runs/scripts/mpi_backend_cpu_wheel.py; wait
source: none known
written: session 10b, unseen
"""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="mpi", init_method="env://")
    rank = dist.get_rank()
    t = torch.full((2,), float(rank))
    dist.all_reduce(t)
    print(f"rank {rank}/{os.environ.get('WORLD_SIZE')}: {t.tolist()}", flush=True)


if __name__ == "__main__":
    main()
