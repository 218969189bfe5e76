"""mistake: a two-node job whose second node has fewer accelerators, so its launch line says
`--nproc-per-node 1` where the first says 2 (c10d rendezvous accepts it: world size 3); the script
builds its 2-D mesh as `(GROUP_WORLD_SIZE, LOCAL_WORLD_SIZE)` (nodes x processes per node), assuming
equal nodes, and the mesh does not match the world. Two c10d "nodes" on loopback. (A first draft
shaped it `(WORLD_SIZE // LOCAL_WORLD_SIZE, LOCAL_WORLD_SIZE)`; torch 2.13 built a smaller mesh from
that without an error.)
label: E6
alternates: D2
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bm eval/runs/scripts/mesh_from_local_world_nproc_differs.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bm eval/runs/scripts/mesh_from_local_world_nproc_differs.py; wait
source: none known
written: session 13b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh


def main():
    dist.init_process_group("gloo")
    nodes = int(os.environ["GROUP_WORLD_SIZE"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (nodes, local_world), mesh_dim_names=("replicate", "shard"))
    model = nn.Linear(16, 16)
    if dist.get_rank() == 0:
        print(f"mesh {mesh}")
    x = torch.randn(4, 16)
    out = model(x).sum()
    out.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, group=mesh.get_group("replicate"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
