"""mistake: init_device_mesh("cuda", ...) copied from a GPU recipe, run on a CPU-only host (the
mesh picks the NCCL backend for cuda).
label: E9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/device_mesh_cuda.py
source: https://github.com/pytorch/pytorch/issues/117746
"""

import os

from torch.distributed.device_mesh import init_device_mesh


def main():
    world = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("dp",))
    print(mesh)


if __name__ == "__main__":
    main()
