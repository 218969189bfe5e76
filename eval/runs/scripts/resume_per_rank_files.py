"""mistake: each rank saves its optimizer shard to ckpt/rank{R}.pt; the job is resumed on 4 ranks
from a checkpoint written by 2, so ranks 2 and 3 look for files that do not exist.
label: D15
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/resume_per_rank_files.py --save && torchrun --nproc-per-node 4 eval/runs/scripts/resume_per_rank_files.py --resume
source: none known
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist

CKPT = os.path.join(tempfile.gettempdir(), "runs7_ckpt_per_rank")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.makedirs(CKPT, exist_ok=True)
    path = os.path.join(CKPT, f"rank{rank}.pt")
    if "--save" in sys.argv:
        if rank == 0:
            for name in os.listdir(CKPT):
                os.remove(os.path.join(CKPT, name))
        dist.barrier()
        torch.save({"step": 100, "exp_avg": torch.randn(50)}, path)
        print(f"rank {rank} saved {path}", flush=True)
    else:
        state = torch.load(path)
        print(f"rank {rank} resumed from step {state['step']}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
