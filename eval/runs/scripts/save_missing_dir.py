"""mistake: rank 0 saves the checkpoint into an output directory that was never created (the
`os.makedirs` lives in a logging helper that is only called when wandb is on); torch.save raises
on rank 0 while rank 1 waits at the barrier after the save.
label: D20
first_rank: 0
launch: torchrun --nproc-per-node 2 eval/runs/scripts/save_missing_dir.py
source: none known
"""

import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    out = os.path.join(tempfile.gettempdir(), "runs7_outputs", "run-2026-11-23")
    model = torch.nn.Linear(4, 4)
    for step in range(3):
        t = torch.ones(1)
        dist.all_reduce(t)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out, "checkpoint-3.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
