"""mistake: rank 2's custom data decoder (native code, here a null pointer through ctypes) crashes
the process; the job runs with `--tee 3` and faulthandler on, so rank 2's fatal-error dump is mixed
with the other ranks' output.
label: P6
first_rank: 2
launch: torchrun --tee 3 --nproc-per-node 3 eval/runs/scripts/tee_segfault_rank2.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import ctypes
import faulthandler

import torch
import torch.distributed as dist


def decode(rank, step):
    if rank == 2 and step == 1:
        ctypes.string_at(0)
    return torch.randn(4)


def main():
    faulthandler.enable()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(3):
        x = decode(rank, step)
        dist.all_reduce(x)
        print(f"rank {rank} step {step} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
