"""mistake: a full (unsharded) state dict saved with torch.save from a single-process run is
loaded with load_state_dict into a model already sharded by FSDP2's fully_shard.
label: E6
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_load_full_state.py
source: none known
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def build():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def main():
    dist.init_process_group("gloo")
    path = os.path.join(tempfile.gettempdir(), "runs7_pretrained_full.pt")
    if dist.get_rank() == 0:
        torch.save(build().state_dict(), path)
    dist.barrier()
    model = build()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    state = torch.load(path)
    model.load_state_dict(state)
    print("loaded", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
