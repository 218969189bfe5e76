"""mistake: the data-parallel mesh is built with `init_device_mesh("cpu", (world,), mesh_dim_names=("dp"))`:
the parentheses do not make a tuple, so the names are the string "dp", two names for a one-dimensional mesh,
and every rank fails building the mesh.
label: E6
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/device_mesh_names_string.py
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp"))
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = model(torch.randn(4, 16)).mean()
    loss.backward()
    opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
