"""mistake: the distributed checkpoint (torch.distributed.checkpoint.save, a collective) is written
under `if rank == 0:` like a torch.save; rank 0 waits inside the save for the others, who went
on (init timeout 10 s).
label: D15
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/dcp_save_main_only.py
source: none known
"""

import shutil
import tempfile
from datetime import timedelta

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = nn.Linear(16, 16)
    path = tempfile.mkdtemp(prefix="dcp_ckpt_") if rank == 0 else None
    if rank == 0:
        dcp.save({"model": model.state_dict()}, checkpoint_id=path)
        print("checkpoint saved to", path, flush=True)
        shutil.rmtree(path, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
