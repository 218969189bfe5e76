"""mistake: rank 1 calls into a native helper through ctypes with a null pointer (a C extension
bug reproduced with ctypes.string_at(0)); the process dies of SIGSEGV with no Python traceback
while rank 0 waits in the all-reduce.
label: P6
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ctypes_segfault_rank1.py
source: none known
"""

import ctypes

import torch
import torch.distributed as dist


def native_decode(rank, step):
    if rank == 1 and step == 2:
        return ctypes.string_at(0)
    return b"ok"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(5):
        native_decode(rank, step)
        t = torch.ones(2)
        dist.all_reduce(t)
        print(f"rank {rank} step {step} {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
