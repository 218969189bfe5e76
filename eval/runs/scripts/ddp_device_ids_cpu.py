"""mistake: the DDP line is copied from a GPU recipe, `DDP(model, device_ids=[local_rank])`, but the
model was never moved to its device (the `.to(local_rank)` line was dropped), so DDP gets CPU
parameters together with a device id.
label: D3
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_device_ids_cpu.py
source: none known
written: session 9, unseen
"""

import os

import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    print("wrapped", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
