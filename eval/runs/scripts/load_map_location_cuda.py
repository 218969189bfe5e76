"""mistake: the script resumes a checkpoint with `map_location=f"cuda:{local_rank}"`, as written for
the GPU cluster, and is run on a CPU-only host (gloo), where every rank fails to deserialise the
tensors onto a CUDA device.
label: none
alternates: E9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/load_map_location_cuda.py
source: none known
written: session 11b, unseen
"""

import io
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def fake_gpu_checkpoint():
    model = nn.Linear(4, 4)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    return buf


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    local_rank = int(os.environ["LOCAL_RANK"])
    model = nn.Linear(4, 4)
    state = torch.load(fake_gpu_checkpoint(), map_location=f"cuda:{local_rank}")
    model.load_state_dict(state)
    print(f"rank {dist.get_rank()} resumed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
