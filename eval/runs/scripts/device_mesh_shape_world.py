"""mistake: a 2-D device mesh for data x tensor parallelism is built with the shape of the 8-process
cluster job, `init_device_mesh("cpu", (2, 4))`, and the script is tried with
`torchrun --nproc-per-node 2` on a workstation; the mesh needs as many processes as it has entries.
label: E6
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/device_mesh_shape_world.py
source: none known
written: session 10b, unseen
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

DP, TP = 2, 4


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    tp_group = mesh.get_group("tp")
    t = torch.ones(4)
    dist.all_reduce(t, group=tp_group)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
