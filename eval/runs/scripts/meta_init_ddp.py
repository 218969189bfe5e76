"""mistake: to start faster, the model is built on the meta device (`with torch.device("meta"):`,
from a large-model recipe) and wrapped in DDP right away; the `to_empty()` and weight loading that
the recipe does before wrapping were left for "after DDP", so DDP gets parameters with no storage.
Output collected with TORCH_SHOW_CPP_STACKTRACES=1 in the second setting.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/meta_init_ddp.py
source: none known
written: session 11, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def build():
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))


def main():
    dist.init_process_group("gloo")
    with torch.device("meta"):
        model = build()
    model = DDP(model)
    model.module.to_empty(device="cpu")
    out = model(torch.randn(4, 32))
    print(f"rank {dist.get_rank()} out {tuple(out.shape)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
