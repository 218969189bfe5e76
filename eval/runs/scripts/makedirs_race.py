"""mistake: every rank creates the experiment's output directory with `os.makedirs(out_dir)` (no
exist_ok, no rank guard); rank 0 creates it first and rank 1 dies with FileExistsError while rank 0
waits in the first all-reduce.
label: D23
alternates: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/makedirs_race.py
source: none known
written: session 9, unseen
"""

import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn

OUT_DIR = "/tmp/r9_outputs/run_lr3e-4"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(OUT_DIR, ignore_errors=True)
    else:
        time.sleep(1.0)
    os.makedirs(OUT_DIR)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum().backward()
    print(f"rank {rank} writing to {OUT_DIR}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
