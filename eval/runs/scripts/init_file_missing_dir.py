"""mistake: the process group is initialised through a shared file (`init_method="file://..."`) on
a path under a run directory that nobody created yet (the makedirs comes later, in the logger
setup), so every rank fails to open the rendezvous file.
label: none
alternates: P1
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/init_file_missing_dir.py
source: none known
written: session 9, unseen
"""

import os

import torch
import torch.distributed as dist

RUN_DIR = "/tmp/r9_runs/exp_0427"


def main():
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", init_method=f"file://{RUN_DIR}/rendezvous", rank=rank, world_size=world_size
    )
    os.makedirs(RUN_DIR, exist_ok=True)
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} ok {t.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
