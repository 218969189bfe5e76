"""D1: `python train.py` on a script that calls init_process_group, with no launcher to set the
rank environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""

import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo")
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)


if __name__ == "__main__":
    main()
