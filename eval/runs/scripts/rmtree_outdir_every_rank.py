"""mistake: the script starts by clearing the output directory (`shutil.rmtree(out)` then
`os.makedirs(out)`) on every rank, while only rank 0 writes checkpoints into it; rank 1, a little
slower to start, removes the directory after rank 0 saved the initial weights there, so rank 0
fails when it reloads them.
Per-rank log files (`--redirects 3 --log-dir`), main wrapped in @record.
label: D23
first_rank: 0
launch: rm -rf /tmp/r12b_out /tmp/r12b_rmtree_logs && torchrun --redirects 3 --log-dir /tmp/r12b_rmtree_logs --nproc-per-node 2 eval/runs/scripts/rmtree_outdir_every_rank.py
source: none known
written: session 12b, unseen
"""

import json
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record

OUT = "/tmp/r12b_out/run1"


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(1.0)  # slower data setup on this rank
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump({"lr": 0.1, "epochs": 1}, f)
    model = nn.Linear(4, 2)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(OUT, "init.pt"))
    time.sleep(3.0)  # one epoch of training
    if rank == 0:
        init = torch.load(os.path.join(OUT, "init.pt"))
        drift = sum((init[k] - v).abs().sum().item() for k, v in model.state_dict().items())
        print(f"weight drift since init: {drift:.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
