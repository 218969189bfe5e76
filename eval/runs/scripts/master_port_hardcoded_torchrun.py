"""mistake: the script keeps the `os.environ["MASTER_ADDR"] = "localhost"; os.environ["MASTER_PORT"]
= "12355"` lines of the mp.spawn tutorial it started from, and is now launched with torchrun, whose
store listens on its own port: every worker knocks on 12355, where nobody listens, until the init
timeout (15 s). Launched with `--redirects 3 --log-dir`, so the workers' output goes to files.
label: P1
alternates: D1
first_rank: none
launch: torchrun --nproc-per-node 2 --redirects 3 --log-dir /tmp/r11b_logs_port eval/runs/scripts/master_port_hardcoded_torchrun.py
source: none known
written: session 11b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))


def main():
    setup()
    model = DDP(nn.Linear(4, 4))
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    print(f"rank {dist.get_rank()} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
