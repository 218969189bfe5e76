"""E6: a 2-D DeviceMesh (data parallel x tensor parallel) written for 4 processes, launched with 2."""

import datetime

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # 4 ranks, the job has 2
    print(f"rank {dist.get_rank()} mesh {mesh}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
